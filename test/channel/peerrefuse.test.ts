// The sender's side of the channel's admission (issue 35 review, finding 4; src/channel/sender-peers.ts):
//   - an owner that refuses this host (closes the connection right after the TLS handshake, as
//     owner-server.ts does for a peer it does not admit) is not connected to again on every
//     request: requests fail at once for a back-off that doubles with each refusal in a row;
//   - an owner whose certificate (of the cluster CA, naming the host) carries a key other than the
//     one its host registered is refused, as the owner refuses such a sender (owner-admit.ts).
// Real TLS and HTTP/2 on loopback under a real cluster CA; the back-off's time is moved by hand.

import { createSecureServer, type Http2SecureServer } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { channelKeyPair, issueIdentity, type Identity } from '../../src/channel/identity.js';
import { PeerAdmission } from '../../src/channel/owner-admit.js';
import { PeerError, Peers, REFUSED_MAX_MS } from '../../src/channel/sender-peers.js';
import { createLogger } from '../../src/log/index.js';
import { ManualClock } from '../helpers/clock.js';
import { twoHosts } from './helpers/hosts.js';

const log = createLogger({ level: 'error' });
const { pair, me, owner } = twoHosts();
const CONNECT_MS = 1000;
const stops: (() => void)[] = [];

test.after(() => {
  for (const s of stops) s();
});

const listen = async (server: TlsServer | Http2SecureServer): Promise<string> => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  stops.push(() => server.close());
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
};

/** Peers of host-b whose back-off runs on `now`. */
function peersOf(now: () => number, admit?: PeerAdmission): Peers {
  const peers = new Peers({ identity: () => me, connectTimeoutMs: CONNECT_MS, log, now, clock: new ManualClock(), admit });
  stops.push(() => peers.close());
  return peers;
}

const outcome = (p: Promise<unknown>) =>
  p.then(
    () => 'session',
    (e: unknown) => (e instanceof PeerError ? (e.refused ? 'refused' : 'failed') : String(e)),
  );

test('an owner that refuses this host is connected to again only after a back-off that doubles', async () => {
  let connections = 0;
  // the owner's side refusing a peer it does not admit: the handshake completes, then the socket is destroyed
  const server = createTlsServer({ ca: owner.ca, cert: owner.cert, key: owner.key, requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['h2'] });
  server.on('secureConnection', (sock) => {
    connections++;
    setImmediate(() => sock.destroy());
  });
  const at = await listen(server);
  let t = 0;
  const peers = peersOf(() => t);
  assert.is(await outcome(peers.session('host-a', at)), 'refused');
  for (let i = 0; i < 10; i++) assert.is(await outcome(peers.session('host-a', at)), 'refused');
  assert.is(connections, 1, 'ten requests within the back-off open no connection');
  t += CONNECT_MS;
  assert.is(await outcome(peers.session('host-a', at)), 'refused');
  assert.is(connections, 2);
  t += CONNECT_MS; // the second refusal in a row waits twice as long
  assert.is(await outcome(peers.session('host-a', at)), 'refused');
  assert.is(connections, 2);
  t += CONNECT_MS;
  assert.is(await outcome(peers.session('host-a', at)), 'refused');
  assert.is(connections, 3);
  for (let i = 0; i < 10; i++) {
    t += REFUSED_MAX_MS;
    await outcome(peers.session('host-a', at));
  }
  const n = connections;
  t += REFUSED_MAX_MS - 1;
  assert.is(await outcome(peers.session('host-a', at)), 'refused');
  assert.is(connections, n, `at most one connection every ${REFUSED_MAX_MS} ms`);
});

test("an owner whose certificate does not carry its host's registered key is refused; with it, the session opens", async () => {
  let streams = 0;
  const impostorKeys = channelKeyPair();
  const impostor = issueIdentity(pair, 'host-a', impostorKeys);
  const h2 = (id: Identity) => {
    const s = createSecureServer({ ca: id.ca, cert: id.cert, key: id.key, requestCert: true, rejectUnauthorized: true });
    s.on('stream', (st) => (streams++, st.respond({ ':status': 200 }), st.end()));
    return s;
  };
  const fake = await listen(h2(impostor));
  const real = await listen(h2(owner));
  const registered = new Map([['host-a', owner.keyId]]);
  const admit = new PeerAdmission({ channelKey: async (host) => registered.get(host) });
  const t = 0;
  const peers = peersOf(() => t, admit);
  assert.is(await outcome(peers.session('host-a', fake)), 'refused', 'a CA-signed host-a with another key');
  assert.is(await outcome(peers.session('host-a', real)), 'session');
  assert.is(streams, 0);
});

test.run();
