// The channel's timers run on the clock it is given (issue 35 item 11; src/clock.ts): a test moves
// time instead of waiting for it, and a daemon's parts share one time. Each case sets its real-time
// timeout far beyond the test's run and moves only the injected clock:
//   - a session's ping deadline (sender-peers.ts): a peer that stops answering is dropped;
//   - a session's connect timeout (sender-connect.ts) and the raw lane's (sender-rawpool.ts);
//   - the wait for the registry's read of a peer's key (owner-admit.ts);
// Real TLS, HTTP/2 and the raw lane on loopback under a real cluster CA.

import { createSecureServer, type Http2SecureServer } from 'node:http2';
import { createServer as createNetServer, connect as netConnect, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { type Server as TlsServer } from 'node:tls';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { issueIdentity, type Identity } from '../../src/channel/identity.js';
import { PeerAdmission } from '../../src/channel/owner-admit.js';
import { Peers } from '../../src/channel/sender-peers.js';
import { RawPool } from '../../src/channel/sender-rawpool.js';
import { createCa } from '../../src/edge/index.js';
import { createLogger } from '../../src/log/index.js';
import type { CaPair } from '../../src/registry/index.js';
import { ManualClock } from '../helpers/clock.js';
import { until } from '../helpers/wait.js';

const log = createLogger({ level: 'error' });
const name = 'rootbox cluster CA';
const pair: CaPair = { name, ...createCa(name) };
const me: Identity = issueIdentity(pair, 'host-b');
const owner: Identity = issueIdentity(pair, 'host-a');
/** Every real-time timeout here: far beyond the test's run, so only the injected clock can end a
 *  wait (and within 10 pings of 5 s: node's HTTP/2 keeps at most 10 unanswered, and a clock moved
 *  in one step sends them all before any can be answered). */
const LONG_MS = 20_000;
const stops: (() => unknown)[] = [];

test.after(async () => {
  for (const s of stops.reverse()) await s();
});

const listen = async (server: NetServer | TlsServer | Http2SecureServer): Promise<string> => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  stops.push(() => server.close());
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
};

/** Whether `p` settled within `ms` of real time: its outcome, or 'pending'. */
const within = (p: Promise<unknown>, ms = 500): Promise<string> =>
  Promise.race([
    p.then(
      () => 'resolved',
      (e: Error) => `rejected: ${e.message}`,
    ),
    new Promise<string>((r) => setTimeout(() => r('pending'), ms)),
  ]);

/** A listener that takes connections and never says a word (no TLS handshake: a peer that hangs). */
async function silent(): Promise<string> {
  const socks: Socket[] = [];
  const server = createNetServer((s) => void socks.push(s.on('error', () => {})));
  stops.push(() => socks.forEach((s) => s.destroy()));
  return listen(server);
}

/** An owner (host-a's HTTP/2 channel) answering every stream with 200. */
async function h2Owner(): Promise<string> {
  const server = createSecureServer({ ca: owner.ca, cert: owner.cert, key: owner.key, requestCert: true, rejectUnauthorized: true });
  server.on('stream', (st) => (st.on('error', () => {}), st.respond({ ':status': 200 }, { endStream: true })));
  server.on('session', (s) => void stops.push(() => s.destroy()));
  return listen(server);
}

test("a peer that stops answering pings is dropped once the injected clock passes the ping's deadline", async () => {
  const ownerAt = await h2Owner();
  // a relay to the owner that can go silent (a partition: nothing is reset, nothing gets through)
  const pipes: Socket[] = [];
  let frozen = false;
  const relay = createNetServer((client) => {
    const upstream = netConnect(Number(ownerAt.split(':')[1]), '127.0.0.1');
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ]) {
      a.on('error', () => {});
      a.on('data', (d: Buffer) => void (frozen || b.write(d)));
    }
    pipes.push(client, upstream);
  });
  stops.push(() => pipes.forEach((s) => s.destroy()));
  const at = await listen(relay);
  const clock = new ManualClock();
  const peers = new Peers({ identity: () => me, connectTimeoutMs: LONG_MS, log, clock, now: () => clock.now() });
  stops.push(() => peers.close());
  const s = await peers.session('host-a', at);
  assert.ok(peers.answering('host-a', at));

  frozen = true;
  clock.advance(5_000); // a ping: no answer
  clock.advance(LONG_MS - 1);
  assert.ok(peers.openNow('host-a', at), 'the deadline not passed yet');
  clock.advance(1);
  assert.is(peers.openNow('host-a', at), undefined, 'dropped at the deadline, by the injected clock');
  assert.not.ok(peers.answering('host-a', at));
  assert.ok(s.destroyed);
  assert.is(await within(peers.session('host-a', at)), 'rejected: the peer did not answer a ping', 'its requests fail at once');
});

test("a connect that never completes fails once the injected clock passes connectTimeout (the session's and the raw lane's)", async () => {
  const at = await silent();
  const clock = new ManualClock();
  const peers = new Peers({ identity: () => me, connectTimeoutMs: LONG_MS, log, clock, now: () => clock.now() });
  stops.push(() => peers.close());
  const opening = peers.session('host-a', at);
  assert.is(await within(opening, 200), 'pending');
  clock.advance(LONG_MS);
  assert.is(await within(opening), `rejected: no channel to host-a at ${at} within ${LONG_MS} ms`);

  const pool = new RawPool({ host: 'host-a', advertise: at, identity: () => me, max: 8, connectTimeoutMs: LONG_MS, idleMs: LONG_MS, clock });
  stops.push(() => pool.close(true));
  let given: unknown = 'not yet';
  assert.ok(pool.acquire({ onData: () => {}, onEnd: () => {} }, (s) => (given = s)));
  await new Promise((r) => setTimeout(r, 200));
  assert.is(given, 'not yet');
  clock.advance(LONG_MS);
  await until('the raw connect given up', () => given !== 'not yet', 5000);
  assert.is(given, undefined, 'no stream: the caller takes the HTTP/2 session');
});

test("a registry read of a peer's key that hangs is waited for by the injected clock", async () => {
  const clock = new ManualClock();
  let hang = false;
  const admit = new PeerAdmission({ channelKey: (host) => (hang ? new Promise(() => {}) : Promise.resolve(host === 'host-b' ? 'K1' : undefined)) }, clock);
  assert.ok(await admit.admit('host-b', 'K1'));
  hang = true;
  const taken = admit.admit('host-b', 'K1');
  assert.is(await within(taken, 200), 'pending', 'waits for the read');
  clock.advance(300);
  assert.is(await within(taken), 'resolved', 'then the key last read decides');
  assert.ok(await taken);
});

test.run();
