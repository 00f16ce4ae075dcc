// The channel's raw lane (src/channel/rawlane.ts, rawpool.ts, rawowner.ts): host B's edge sends a
// bodiless GET/HEAD for a server of host A as plain HTTP/1.1 over pooled mutual-TLS connections
// into A's proxy lane. Real pieces on loopback: B's Edge with the channel's front and peers, A's
// channel server with its real proxy, an app (node:http) on its own port, and a TCP relay between
// B and A's channel listener that counts, and can cut, the connections B opens.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { createServer as createNetServer, connect as netConnect, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClusterFront } from '../../src/channel/front.js';
import { issueIdentity } from '../../src/channel/identity.js';
import type { Placements } from '../../src/channel/lookup.js';
import { Peers } from '../../src/channel/peers.js';
import { ChannelServer } from '../../src/channel/server.js';
import { createCa, Edge, issueLeaf, loadCa, TlsManager } from '../../src/edge/index.js';
import type { HttpApp } from '../../src/http/index.js';
import { createLogger } from '../../src/log/index.js';
import { createProxy, type Site } from '../../src/proxy/index.js';
import type { CaPair } from '../../src/registry/index.js';
import { runningRuntime, sitesOf, testConfig } from '../proxy/helpers.js';
import { until } from '../helpers/wait.js';

const DOMAIN = 'rbx.test';
const top = mkdtempSync(join(tmpdir(), 'rbx-rawlane-'));
const log = createLogger({ level: 'error' });
const name = 'rootbox cluster CA';
const pair: CaPair = { name, ...createCa(name) };
const stops: (() => unknown)[] = [];
let edgePort = 0;
let channelPort = 0;
/** Connections B opened to A's channel (through the relay), in order. */
const relayed: { client: Socket; upstream: Socket; down: number }[] = [];
/** What the app was sent, per request. */
const seen: Record<string, string | string[] | undefined>[] = [];
let appPort = 0;
/** Egress A's proxy counted, by server. */
const egress: Record<string, number> = {};
/** Ends the slow answers under way. */
const release: (() => void)[] = [];
/** B's peers (a test may take the raw pool away: lane requests then go over the HTTP/2 session). */
let peersB: Peers;

test.before(async () => {
  const rootfs = join(top, 'rootfs');
  mkdirSync(join(rootfs, 'root'), { recursive: true });
  writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\n');
  chmodSync(join(rootfs, 'root/run.sh'), 0o755);
  const app: Server = createServer((req, res) => {
    seen.push(req.headers);
    const slow = /^\/slow\/(\d+)$/.exec(req.url ?? '');
    if (!slow) return void res.end(`hello ${req.url}`);
    // a first part at once, the rest when the test says (or the connection goes)
    res.writeHead(200, { 'content-length': String(2 * Number(slow[1])) });
    res.write('a'.repeat(Number(slow[1])));
    release.push(() => res.end('b'.repeat(Number(slow[1]))));
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  appPort = (app.address() as AddressInfo).port;
  stops.push(() => (app.closeAllConnections(), app.close()));

  // host A: its proxy serves srv_raw (an app) behind its channel server
  const site: Site = { id: 'srv_raw', slug: 'raw', rootfs, upstream: { host: '127.0.0.1', port: appPort }, neverSleep: true, suspended: false };
  const sites = sitesOf([site]);
  const proxy = createProxy({ log, sites, runtime: runningRuntime(sites), cfg: testConfig(), egress: (id, n) => (egress[id] = (egress[id] ?? 0) + n) });
  const identityA = issueIdentity(pair, 'host-a');
  const server = new ChannelServer({
    identity: () => identityA,
    local: proxy,
    servers: { bySlug: (slug) => (slug === 'raw' ? { id: 'srv_raw' } : undefined), get: (id) => (id === 'srv_raw' ? { id } : undefined) },
    placements: { byServer: () => undefined },
    log,
  });
  channelPort = await server.listen('127.0.0.1:0');
  stops.push(
    () => server.close(),
    () => proxy.stop(),
  );

  // the relay B reaches A through
  const relay: NetServer = createNetServer((client) => {
    const upstream = netConnect(channelPort, '127.0.0.1');
    const entry = { client, upstream, down: 0 };
    relayed.push(entry);
    upstream.on('data', (d: Buffer) => (entry.down += d.length));
    client.pipe(upstream).pipe(client);
    const cut = () => (client.destroy(), upstream.destroy());
    client.on('error', cut).on('close', cut);
    upstream.on('error', cut).on('close', cut);
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  const relayPort = (relay.address() as AddressInfo).port;
  stops.push(() => {
    for (const e of relayed) e.client.destroy();
    relay.close();
  });

  // host B: an edge whose proxy runs nothing; the front forwards raw.rbx.test to host-a
  const identityB = issueIdentity(pair, 'host-b');
  const placement = { serverId: 'srv_raw', slug: 'raw', host: 'host-a', epoch: 1 };
  const placements: Placements = {
    bySlug: (slug) => (slug === 'raw' ? placement : undefined),
    byServer: (id) => (id === placement.serverId ? placement : undefined),
    fresh: async (slug) => (slug === 'raw' ? placement : undefined),
    host: (n) => (n === 'host-a' ? { name: n, advertise: `127.0.0.1:${relayPort}`, up: true } : undefined),
  };
  const peers = (peersB = new Peers({ identity: () => identityB, connectTimeoutMs: 2000, log }));
  const local = createProxy({ log, cfg: testConfig(), sites: { lookup: () => undefined, neverSleep: () => false } });
  const front = new ClusterFront({ local, servers: { bySlug: () => undefined }, placements, peers, self: 'host-b', retryBody: 1 << 20, log });
  const nope: HttpApp = { handle: async (_q, r) => void r.writeHead(404).end() };
  const tls = new TlsManager({ domain: DOMAIN, dataDir: join(top, 'b'), log });
  const edge = new Edge({
    domain: DOMAIN,
    http: { host: '127.0.0.1', port: 0, redirect: false },
    https: { host: '127.0.0.1', port: 0 },
    tls,
    log,
    apps: { hosting: nope, verify: nope, proxy: front },
  });
  await edge.start();
  edgePort = edge.ports.http;
  stops.push(
    () => edge.stop(200),
    () => peers.close(),
    () => local.stop(),
    () => tls.close(),
  );
});

test.after(async () => {
  for (const s of stops.reverse()) await s();
  rmSync(top, { recursive: true, force: true });
});

/** One GET through B's edge on a connection of its own: status, body, and whether it was cut. */
function get(path: string, o: { onFirst?: (sock: Socket) => void } = {}): Promise<{ status: number; body: string; cut: boolean; read: number }> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port: edgePort, path, agent: false, headers: { host: `raw.${DOMAIN}` } }, (res) => {
      let body = '';
      let first = true;
      res.setEncoding('latin1');
      res.on('data', (d: string) => {
        body += d;
        if (first) o.onFirst?.(req.socket as Socket);
        first = false;
      });
      const read = () => (req.socket as Socket).bytesRead;
      res.on('end', () => resolve({ status: res.statusCode!, body, cut: false, read: read() }));
      res.on('error', () => resolve({ status: res.statusCode!, body, cut: true, read: read() }));
      res.on('aborted', () => resolve({ status: res.statusCode!, body, cut: true, read: read() }));
    });
    req.on('error', () => resolve({ status: 0, body: '', cut: true, read: 0 }));
    req.end();
  });
}

test('lane requests through B reuse one pooled HTTP/1.1 connection to A, beside the HTTP/2 session', async () => {
  // the first opens the HTTP/2 session (the full path); the raw lane needs it open
  assert.is((await get('/warm')).status, 200);
  await until('the first answer is counted', () => egress.srv_raw > 0, 5000);
  const before = relayed.length;
  const counted = egress.srv_raw;
  let read = 0;
  for (let i = 0; i < 5; i++) {
    const r = await get(`/seq/${i}`);
    assert.is(r.status, 200);
    assert.is(r.body, `hello /seq/${i}`);
    read += r.read;
  }
  assert.is(relayed.length - before, 1, 'one raw connection carried the five requests');
  // egress is counted once, on A, from what it wrote on the channel: the answers as the clients read
  // them, but for the `connection: close` B adds for its own clients (they asked to close)
  const wrote = read - 5 * 'connection: close\r\n'.length;
  await until('A counts the answers', () => egress.srv_raw - counted >= wrote, 5000);
  assert.is(egress.srv_raw - counted, wrote);
  // the client's address as B saw it reached the app; the channel's own fields did not
  const last = seen[seen.length - 1];
  assert.is(last['x-forwarded-for'], '127.0.0.1');
  assert.is(Object.keys(last).filter((k) => k.startsWith('x-rootbox-')).length, 0, JSON.stringify(last));
});

test('a channel connection cut mid-answer cuts only the client it carried, and is never used again', async () => {
  await get('/warm2');
  const n = 200_000;
  const firsts: number[] = [];
  // two slow answers at once: each on a raw connection of its own (the free one, and a new one)
  const answers = [get(`/slow/${n}`, { onFirst: () => firsts.push(1) }), get(`/slow/${n}`, { onFirst: () => firsts.push(1) })];
  await until('both answers began', () => firsts.length === 2 && release.length === 2, 10_000);
  const raw = relayed.filter((e) => e.down > n && !e.client.destroyed); // the two carrying them
  assert.is(raw.length, 2, `connections carrying an answer: ${raw.length}`);
  raw[0].upstream.destroy(); // cut the first
  for (const go of release.splice(0)) go();
  const got = await Promise.all(answers);
  assert.is(got.filter((g) => g.cut).length, 1, 'the client on the cut connection sees a truncated answer');
  const whole = got.find((g) => !g.cut)!;
  assert.is(whole.body.length, 2 * n, 'the other answer is whole');
  // the next request takes the connection that is left, never the cut one
  const count = relayed.length;
  const next = await get('/after-cut');
  assert.is(next.body, 'hello /after-cut');
  assert.is(relayed.length, count, 'no new connection: the surviving one was reused');
});

test('a client that leaves mid-answer costs its pooled connection: the next client gets its own answer, on a new one', async () => {
  await get('/warm3');
  const n = 100_000;
  const count = relayed.length;
  const left = get(`/slow/${n}`, { onFirst: (s) => s.destroy() });
  const r = await left;
  assert.ok(r.cut);
  await until('the app was asked', () => release.length === 1, 5000);
  for (const go of release.splice(0)) go();
  // the pooled connection still had the rest of that answer coming: it must not carry the next one
  const next = await get('/mine');
  assert.is(next.status, 200);
  assert.is(next.body, 'hello /mine');
  assert.is(relayed.length, count + 1, 'the next request opened a new connection');
});

test('pipelined lane requests through B over the HTTP/2 session (no raw pool) are answered once each, in order: one behind a slow answer waits for it', async () => {
  await get('/warm'); // the session to A is open
  const raw = peersB.raw.bind(peersB);
  peersB.raw = () => undefined;
  const sock = netConnect(edgePort, '127.0.0.1');
  try {
    const paths = ['/p1', '/slow/1000', '/p3'];
    sock.write(paths.map((x) => `GET ${x} HTTP/1.1\r\nhost: raw.${DOMAIN}\r\n\r\n`).join(''));
    let got = '';
    sock.setEncoding('latin1');
    sock.on('data', (d: string) => (got += d));
    await until('the slow answer begun', () => got.includes('a'.repeat(1000)) && release.length > 0, 5000);
    await new Promise((r) => setTimeout(r, 50)); // a request started beside the slow one would be answered by now
    assert.not.ok(got.includes('hello /p3'), 'the third request waits for the second answer to end');
    for (const end of release.splice(0)) end();
    await until('the third answer', () => got.includes('hello /p3'), 5000);
    const at = ['hello /p1', 'b'.repeat(1000), 'hello /p3'].map((w) => got.indexOf(w));
    assert.ok(at[0] >= 0 && at[0] < at[1] && at[1] < at[2], `in order: ${at.join(', ')}`);
    assert.is([...got.matchAll(/HTTP\/1\.1 200/g)].length, 3, 'one answer each');
  } finally {
    sock.destroy();
    peersB.raw = raw;
  }
});

test("A's raw listener hears only hosts of the cluster CA: a member's client address is trusted, a forged or missing certificate is refused", async () => {
  const ask = (cert?: { cert: string; key: string }) =>
    new Promise<string>((resolve) => {
      const s = tlsConnect({ host: '127.0.0.1', port: channelPort, ca: pair.certPem, servername: 'host-a', ALPNProtocols: ['http/1.1'], ...cert }, () => {
        s.write(
          `GET /who HTTP/1.1\r\nhost: raw.${DOMAIN}\r\nx-rootbox-site: raw.${DOMAIN}\r\nx-rootbox-client-ip: 203.0.113.7\r\nx-rootbox-scheme: https\r\n` +
            `x-request-id: rid-raw-1\r\nx-rootbox-server: srv_raw\r\nx-rootbox-epoch: 1\r\nx-rootbox-hops: 1\r\n\r\n`,
        );
      });
      let got = '';
      s.setEncoding('latin1');
      s.on('data', (d: string) => {
        got += d;
        if (got.includes('hello /who')) (resolve(got), s.destroy());
      });
      s.on('error', (e: Error & { code?: string }) => resolve(`refused: ${e.code ?? e.message}`));
      s.on('close', () => resolve(got ? got : 'refused: closed'));
    });
  const member = issueIdentity(pair, 'host-x');
  const answer = await ask({ cert: member.cert, key: member.key });
  assert.match(answer, /^HTTP\/1\.1 200 /, answer);
  assert.is(seen[seen.length - 1]['x-forwarded-for'], '203.0.113.7', 'a member vouches for its client');
  assert.is(seen[seen.length - 1]['x-request-id'], 'rid-raw-1');
  const asked = seen.length;
  assert.match(await ask(), /^refused/, 'no certificate');
  const self = createCa('host-x');
  assert.match(await ask({ cert: self.certPem, key: self.keyPem }), /^refused/, 'a self-signed certificate');
  const other = createCa(name);
  const forged = issueLeaf(loadCa(other.certPem, other.keyPem, name), ['host-b'], 1, true);
  assert.match(await ask({ cert: forged.certPem, key: forged.keyPem }), /^refused/, 'a certificate of another CA with the same name');
  assert.is(seen.length, asked, 'no refused request reached the app');
});

test.run();
