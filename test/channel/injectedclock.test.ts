// The channel's timers run on the clock it is given (issue 35 item 11; src/clock.ts): a test moves
// time instead of waiting for it, and a daemon's parts share one time. Each case sets its real-time
// timeout far beyond the test's run and moves only the injected clock:
//   - a session's ping deadline (sender-peers.ts): a peer that stops answering is dropped;
//   - a session's connect timeout (sender-connect.ts) and the raw lane's (sender-rawpool.ts);
//   - the wait for the registry's read of a peer's key (owner-admit.ts);
//   - the channel part's own servers (part.ts): its raw lane's idle timer and the SSH open's timeout.
// Real TLS, HTTP/2 and the raw lane on loopback under a real cluster CA.

import { createSecureServer, type Http2SecureServer, type ServerHttp2Stream } from 'node:http2';
import { createServer as createNetServer, connect as netConnect, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { connect as tlsConnect, type Server as TlsServer } from 'node:tls';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startChannel, type Channel } from '../../src/channel/index.js';
import { PeerAdmission } from '../../src/channel/owner-admit.js';
import { Peers } from '../../src/channel/sender-peers.js';
import { RawPool } from '../../src/channel/sender-rawpool.js';
import { MUX_ALPN } from '../../src/channel/wire-mux.js';
import { SSH_KIND } from '../../src/channel/wire.js';
import { createLogger } from '../../src/log/index.js';
import { ManualClock } from '../helpers/clock.js';
import { twoHosts } from './helpers/hosts.js';
import { until } from '../helpers/wait.js';

const log = createLogger({ level: 'error' });
const { pair, me, owner } = twoHosts();
/** Every real-time timeout here: far beyond the test's run, so only the injected clock can end a
 *  wait (and within 10 pings of 5 s: node's HTTP/2 keeps at most 10 unanswered, and a clock moved
 *  in one step sends them all before any can be answered). */
const LONG_MS = 20_000;
/** How long the owner keeps an idle raw lane connection (owner-server.ts). */
const RAW_IDLE_MS = 60_000;
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

/** Resolves once `clock` holds more timers than `before`: the deadline a pending promise now
 *  waits for is set, and only moving the clock can pass it (no wait of the system clock's). */
const armed = (clock: ManualClock, before: number): Promise<unknown> => until('its deadline set on the clock', () => clock.pending > before, 5000);

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
  const before = clock.pending;
  const opening = peers.session('host-a', at);
  await armed(clock, before);
  assert.is(await within(opening, 0), 'pending');
  clock.advance(LONG_MS);
  assert.is(await within(opening), `rejected: no channel to host-a at ${at} within ${LONG_MS} ms`);

  const pool = new RawPool({ host: 'host-a', advertise: at, identity: () => me, max: 8, connectTimeoutMs: LONG_MS, idleMs: LONG_MS, clock });
  stops.push(() => pool.close(true));
  let given: unknown = 'not yet';
  const unarmed = clock.pending;
  assert.ok(pool.acquire({ onData: () => {}, onEnd: () => {} }, (s) => (given = s)));
  await armed(clock, unarmed);
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
  const before = clock.pending;
  const taken = admit.admit('host-b', 'K1');
  await armed(clock, before);
  assert.is(await within(taken, 0), 'pending', 'waits for the read');
  clock.advance(300);
  assert.is(await within(taken), 'resolved', 'then the key last read decides');
  assert.ok(await taken);
});

/** host-a's channel part on `clock`, its registry knowing host-b (key and a server of it at `bAt`). */
async function part(clock: ManualClock, bAt: string): Promise<Channel> {
  const registered = new Map([['host-b', me.keyId]]);
  const c = await startChannel({
    cfg: { cluster: { listen: '127.0.0.1:0', forwardConnectTimeout: LONG_MS, forwardRetryBody: 1024, forwardRetryPerSource: 4096, forwardRetryTotal: 65536 } },
    log,
    registry: {
      host: 'host-a',
      channel: { load: async () => pair },
      registerChannelKey: async (key: string) => void registered.set('host-a', key),
      hosts: { channelKey: async (host: string) => registered.get(host) },
      placements: {
        bySlug: () => undefined,
        byServer: (id: string) => (id === 'srv_b1' ? { serverId: id, slug: 'b1', host: 'host-b', epoch: 1 } : undefined),
        fresh: async () => undefined,
        host: (n: string) => (n === 'host-b' ? { name: n, advertise: bAt, up: true } : undefined),
        ofAccount: () => [],
        sync: async () => {},
      },
    },
    store: { servers: { bySlug: () => undefined, get: () => undefined } },
    proxy: { handle: (_req, res) => void res.writeHead(404).end() },
    clock,
  });
  if (!c) throw new Error('the channel is not up');
  stops.push(() => c.stop());
  return c;
}

test("the channel part's raw lane closes an idle connection by the part's clock", async () => {
  const clock = new ManualClock();
  const c = await part(clock, '127.0.0.1:9');
  // host-b's raw lane connection to host-a, idle
  const timers = clock.pending;
  const raw = tlsConnect({ host: '127.0.0.1', port: c.port, ca: me.ca, cert: me.cert, key: me.key, servername: 'host-a', ALPNProtocols: [MUX_ALPN] });
  stops.push(() => raw.destroy());
  raw.on('error', () => {});
  let closed = false;
  raw.on('close', () => (closed = true));
  await new Promise<void>((r) => raw.once('secureConnect', () => r()));
  assert.is(raw.alpnProtocol, MUX_ALPN);
  await until('the owner took the raw connection (its idle timer set)', () => clock.pending > timers, 5000);
  clock.advance(RAW_IDLE_MS - 1);
  assert.ok(clock.pending > timers, 'its idle timer still set: it did not fire'); // a close would start from it, synchronously
  assert.not.ok(closed, 'not idle long enough yet');
  clock.advance(1);
  await until('the idle raw connection closed by the owner', () => closed, 5000);
});

test("the channel part's SSH open times out by the part's clock", async () => {
  // host-b's channel: takes the SSH stream and never answers it (its other streams, answered)
  const bServer = createSecureServer({ ca: me.ca, cert: me.cert, key: me.key, requestCert: true, rejectUnauthorized: true });
  const sshStreams: ServerHttp2Stream[] = [];
  bServer.on('stream', (st, h) => {
    st.on('error', () => {});
    if (h[SSH_KIND] === 'ssh') sshStreams.push(st);
    else st.respond({ ':status': 200 }, { endStream: true });
  });
  bServer.on('session', (s) => void stops.push(() => s.destroy()));
  const clock = new ManualClock();
  const c = await part(clock, await listen(bServer));
  const before = clock.pending;
  const opening = c.openSsh('srv_b1', { ip: '192.0.2.1', port: 40000 });
  await until('the SSH stream at host-b', () => sshStreams.length > 0, 5000);
  await armed(clock, before);
  assert.is(await within(opening, 0), 'pending');
  clock.advance(LONG_MS - 1);
  assert.is(await within(opening, 0), 'pending');
  clock.advance(1);
  assert.match(await within(opening), `did not answer within ${LONG_MS} ms`);
});

test.run();
