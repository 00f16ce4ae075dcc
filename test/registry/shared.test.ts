// Shared records of cluster mode against real components: two daemons on one PostgreSQL
// registry, Pebble as the ACME CA, BIND (named) taking the DNS-01 updates. Both hosts need the
// host certificate at the same instant → exactly one ACME order, and each host's edge presents
// that same certificate by SNI (its private key stored sealed, not in clear); a certificate
// ordered later by A reaches B's edge through B's poll; the same custom domain claimed on A and
// B at once goes to exactly one; a server's SSH key fingerprint made on A is found through B's
// registry (and one placed before keys were shared is recorded at its host's next start); with the registry down, ordering and claiming answer 503 registry_unavailable while
// both edges keep serving what they loaded. Eight orders at once hold no registry connection
// across the order (the pool's other users answer meanwhile, the heartbeat keeps its lease) and a
// crashed orderer's lease expires.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { X509Certificate } from 'node:crypto';
import { rmSync } from 'node:fs';
import { connect as tlsConnect } from 'node:tls';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { createCa, issueLeaf, loadCa } from '../../src/edge/pki.js';
import { RegistryPool, RegistryShared } from '../../src/registry/index.js';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startNamed, type NamedServer } from '../helpers/named.js';
import { startPebble, type PebbleServer } from '../helpers/pebble.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import type { ProcessRuntime } from '../helpers/procruntime.js';
import { until } from '../helpers/wait.js';
import { initRegistry, testKeys } from '../helpers/cluster.js';

const DOMAIN = 'rbxshared.test';
let pg: TestPostgres;
let dns: NamedServer;
let ca: PebbleServer;
let a: TestDaemon;
let b: TestDaemon;
const reused: string[] = [];

const opts = (host: string) => ({
  domain: DOMAIN,
  publicIp: '127.0.0.1',
  // B's poll for other hosts' certificates every 300 ms, not every 10 s: a test sees it without waiting
  cluster: { registry: pg.url, host, lease: '3s', connectTimeout: '500ms', statementTimeout: '2s', certificatePoll: '300ms' },
  https: {
    host: '127.0.0.1',
    port: 0,
    acme: {
      directory: ca.directory,
      caFile: ca.caFile,
      retryAfter: '1s',
      dns: { provider: 'rfc2136', propagationTimeout: '20s', rfc2136: { server: dns.server, keyName: dns.keyName, keySecret: dns.keySecret } },
    },
  },
  hosting: {
    rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 },
    anonServersPerIp: 20, // both hosts create from 127.0.0.1; the cap (counted across hosts) is not what is tested here
    domains: { resolver: dns.server, checkInterval: '1h', limits: { paid: 3 } },
  },
});
const api = (d: TestDaemon, method: string, path: string, o: { key?: string; body?: unknown } = {}) =>
  send(d.http, `api.${DOMAIN}`, method, path, { body: o.body, headers: o.key ? { authorization: `Bearer ${o.key}` } : {} });
const ordered = (d: TestDaemon, id: string) => d.logs.filter((l) => l.msg === 'certificate ordered for the cluster' && l.id === id).length;

/** The certificate a daemon's edge presents for an SNI name (a new TLS handshake). */
function served(d: TestDaemon, name: string): Promise<{ serial: string; san: string }> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port: d.https, servername: name, rejectUnauthorized: false }, () => {
      const c = s.getPeerCertificate();
      s.destroy();
      resolve({ serial: c.serialNumber, san: c.subjectaltname ?? '' });
    });
    s.on('error', reject);
  });
}
const serialOf = (pem: string) => new X509Certificate(pem).serialNumber;

test.before(async () => {
  pg = await startPostgres();
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(p);
  await p.end();
  dns = await startNamed({ zones: [DOMAIN, 'customer.test'] });
  ca = await startPebble({ dnsServer: dns.server });
  // both hosts start at the same instant: both need the host certificate at once
  [a, b] = await Promise.all([startTestDaemon(opts('host-a')), startTestDaemon(opts('host-b'))]);
});
test.after(async () => {
  await a?.stop();
  await b?.stop();
  await ca?.stop();
  await dns?.stop();
  await pg?.stop();
  for (const dir of reused) rmSync(dir, { recursive: true, force: true });
});

test('two hosts needing the host certificate at once make exactly one ACME order, and both edges present it by SNI', async () => {
  const done = () => a.daemon.acme.status() as { state: string };
  await until(
    'both hosts hold the host certificate',
    () => done().state === 'active' && (b.daemon.acme.status() as { state: string }).state === 'active',
    60_000,
    100,
  );
  assert.is(ordered(a, 'host') + ordered(b, 'host'), 1, 'one order across the cluster');
  const row = await pg.sql(`SELECT cert_pem FROM certificates WHERE id = 'host'`);
  const [sa, sb] = await Promise.all([served(a, `api.${DOMAIN}`), served(b, `myslug.${DOMAIN}`)]);
  assert.is(sa.serial, serialOf(row));
  assert.is(sb.serial, serialOf(row), "B's edge presents the certificate the other host ordered");
  assert.match(sb.san, `DNS:*.${DOMAIN}`);
  // the private key is sealed in the registry, never in clear
  assert.is(await pg.sql(`SELECT count(*) FROM certificates WHERE position('PRIVATE KEY'::bytea in key_enc) > 0 OR length(key_enc) < 100`), '0');
});

test("a certificate ordered by A later reaches B's edge through B's poll of the registry", async () => {
  const name = `shop.${DOMAIN}`;
  const rec = await a.daemon.acme.obtain(name, [name], 'dns-01', () => false);
  assert.is(ordered(a, name), 1);
  await until("B's edge presents A's certificate", async () => (await served(b, name)).serial === serialOf(rec.certPem), 20_000, 100);
  assert.is(ordered(b, name), 0);
});

test('a server SSH key fingerprint made on A is found through B’s registry lookup', async () => {
  const made = await api(a, 'POST', '/create', { body: {} });
  assert.is(made.status, 200, made.text);
  const rec = a.daemon.store.servers.get(made.json.id)!;
  const found = await b.daemon.registry!.shared.byFingerprint(rec.keyFingerprint);
  assert.equal(found, [{ serverId: rec.id, fingerprint: rec.keyFingerprint, publicKey: rec.sshPublicKey, host: 'host-a' }]);
  assert.is((await api(a, 'DELETE', `/servers/${made.json.id}`, { key: made.json.api_key })).status, 200);
  assert.equal(await b.daemon.registry!.shared.byFingerprint(rec.keyFingerprint), [], 'a deleted server’s key is forgotten');
});

test("a server placed before its key was in the registry has its key recorded at its host's next start", async () => {
  const made = await api(b, 'POST', '/create', { body: {} });
  assert.is(made.status, 200, made.text);
  const rec = b.daemon.store.servers.get(made.json.id)!;
  await pg.sql(`DELETE FROM server_keys WHERE server_id = '${rec.id}'`);
  assert.equal(await a.daemon.registry!.shared.byFingerprint(rec.keyFingerprint), []);
  const old = b;
  await old.daemon.stop(); // the same data dir and host name start again
  await (old.daemon.runtime as unknown as ProcessRuntime).stopAll(); // plain processes the next runtime does not adopt
  b = await startTestDaemon({ ...opts('host-b'), dataDir: old.dataDir });
  reused.push(old.dataDir);
  assert.equal(
    (await a.daemon.registry!.shared.byFingerprint(rec.keyFingerprint)).map((k) => `${k.serverId} ${k.host}`),
    [`${rec.id} host-b`],
  );
});

test("an HTTP-01 token A's order holds is answered by B's plain HTTP edge (the CA may reach any host), and no longer once A drops it", async () => {
  const token = 'tok' + Date.now().toString(36);
  const ask = () => fetch(`http://127.0.0.1:${b.http}/.well-known/acme-challenge/${token}`, { headers: { host: 'shop.example.net' } });
  assert.is.not((await ask()).status, 200, 'no host holds the token yet');
  await a.daemon.acme.http01.set(token, `${token}.thumbprint`);
  const r = await ask();
  assert.is(r.status, 200);
  assert.is(await r.text(), `${token}.thumbprint`);
  await a.daemon.acme.http01.delete(token);
  // B keeps the tokens in memory: the drop reaches it with the registry's notification
  await until('B no longer answers the dropped token', async () => (await ask()).status !== 200, 5000, 20);
});

test('the same custom domain claimed on A and B at once goes to exactly one', async () => {
  const sa = await api(a, 'POST', '/create', { body: {} });
  const sb = await api(b, 'POST', '/create', { body: {} });
  assert.is(sa.status, 200, sa.text);
  assert.is(sb.status, 200, sb.text);
  assert.ok(await a.daemon.billing.credit(a.daemon.store.servers.get(sa.json.id)!.accountId, 5, 'test:shared:a'));
  assert.ok(await b.daemon.billing.credit(b.daemon.store.servers.get(sb.json.id)!.accountId, 5, 'test:shared:b'));
  const body = { domain: 'www.customer.test' };
  const [ra, rb] = await Promise.all([
    api(a, 'POST', `/servers/${sa.json.id}/domains`, { key: sa.json.api_key, body }),
    api(b, 'POST', `/servers/${sb.json.id}/domains`, { key: sb.json.api_key, body }),
  ]);
  assert.equal([ra.status, rb.status].sort(), [200, 409], `${ra.text} ${rb.text}`);
  const [won, lost, host] = ra.status === 200 ? [sa, rb, 'host-a'] : [sb, ra, 'host-b'];
  assert.is(lost.json.error, 'domain_taken');
  assert.is(await pg.sql(`SELECT server_id || ' ' || host FROM custom_domains WHERE domain = 'www.customer.test'`), `${won.json.id} ${host}`);
  // detached on its holder, the name is free for the other host
  const holder = host === 'host-a' ? a : b;
  assert.is((await api(holder, 'DELETE', `/servers/${won.json.id}/domains/www.customer.test`, { key: won.json.api_key })).status, 200);
  const other = host === 'host-a' ? sb : sa;
  const again = await api(host === 'host-a' ? b : a, 'POST', `/servers/${other.json.id}/domains`, { key: other.json.api_key, body });
  assert.is(again.status, 200, again.text);
});

/** A certificate for `names` (what an order hands back), from a throwaway CA. */
function leafFor(names: string[]): { names: string[]; certPem: string; keyPem: string; notAfter: number } {
  const c = createCa('rootbox test orders');
  const leaf = issueLeaf(loadCa(c.certPem, c.keyPem, 'rootbox test orders'), names);
  return { names, certPem: leaf.certPem, keyPem: leaf.keyPem, notAfter: Date.now() + 30 * 86_400_000 };
}

test('8 orders at once hold no registry connection while the CA works: another statement of the same 8-connection pool answers at once, and each is ordered once', async () => {
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 2000, statementTimeoutMs: 2000 });
  try {
    const shared = new RegistryShared(p, 'host-o', testKeys());
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    let ordering = 0;
    const orders = Array.from({ length: 8 }, (_, i) =>
      shared.orderOnce(
        `gate-${i}`,
        () => false,
        async () => {
          ordering++;
          await gate; // the CA still working on all eight
          return leafFor([`gate${i}.example.org`]);
        },
      ),
    );
    const settled = Promise.allSettled(orders); // handled from the start: one that fails early fails the test, not the process
    let during: unknown;
    try {
      await until('8 orders under way', () => ordering === 8, 10_000);
      const t0 = performance.now();
      // what the heartbeat, auth and the fence do meanwhile: before, it waited for a connection and failed
      await p.query('SELECT 1');
      console.log(`    a statement during 8 orders answered in ${(performance.now() - t0).toFixed(1)} ms`);
      const r = await p.query<{ n: string }>('SELECT count(*) AS n FROM certificate_orders WHERE id LIKE $1', ['gate-%']);
      assert.is(r.rows[0].n, '8', 'eight leases held');
    } catch (e) {
      during = e;
    } finally {
      open();
    }
    const got = await settled;
    assert.is(during, undefined, `a statement of the pool during the orders: ${String(during)}`);
    assert.equal(
      got.map((g) => g.status === 'fulfilled' && g.value.ordered),
      Array(8).fill(true),
    );
    assert.is(await pg.sql(`SELECT count(*) FROM certificate_orders`), '0', 'every lease released');
    for (let i = 0; i < 8; i++) await shared.removeCertificate(`gate-${i}`);
  } finally {
    await p.end();
  }
});

test('a crashed orderer’s lease expires: another host then orders; a live lease is waited for and its result taken', async () => {
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 2000, statementTimeoutMs: 2000 });
  try {
    const shared = new RegistryShared(p, 'host-o', testKeys());
    let polls = 0;
    const fast = (ms: number) => (polls++, new Promise<void>((r) => setTimeout(r, Math.min(ms, 50))));
    // a holder that died mid-order (its lease not renewed): taken over once it expires
    await pg.sql(`INSERT INTO certificate_orders (id, holder, until) VALUES ('crashed', 'host-z 00', now() + interval '1 second')`);
    const t0 = performance.now();
    const after = await shared.orderOnce(
      'crashed',
      () => false,
      async () => leafFor(['crashed.example.org']),
      fast,
    );
    const waited = performance.now() - t0;
    assert.ok(after.ordered, 'ordered here once the dead lease expired');
    assert.ok(waited >= 500 && waited < 5000, `waited ${waited.toFixed(0)} ms for the lease to expire`);
    // a live holder: the other waits, then takes what it stored without ordering
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    let orders = 0;
    const first = shared.orderOnce(
      'live',
      (c) => c.notAfter > Date.now(),
      async () => (orders++, await gate, leafFor(['live.example.org'])),
    );
    await until('the first holds the lease', async () => (await pg.sql(`SELECT count(*) FROM certificate_orders WHERE id = 'live'`)) === '1', 5000);
    polls = 0;
    const second = shared.orderOnce(
      'live',
      (c) => c.notAfter > Date.now(),
      async () => (orders++, leafFor(['live.example.org'])),
      fast,
    );
    await until('the second waits on the lease', () => polls > 0, 5000, 5);
    open();
    const [x, y] = await Promise.all([first, second]);
    assert.is(orders, 1, 'one order');
    assert.equal([x.ordered, y.ordered], [true, false]);
    assert.is(y.cert.certPem, x.cert.certPem);
    for (const id of ['crashed', 'live']) await shared.removeCertificate(id);
  } finally {
    await p.end();
  }
});

test('8 certificates ordered at once through Pebble on A: each ordered once, A keeps its lease (B sees it up) and a key made on B is authenticated on A meanwhile', async () => {
  const made = await api(b, 'POST', '/create', { body: {} });
  assert.is(made.status, 200, made.text);
  const names = Array.from({ length: 8 }, (_, i) => `many${i}.${DOMAIN}`);
  // A's pool warm (its 8 connections open, as under load): this box's connects alone can exceed the test's 500 ms connect timeout
  await Promise.all(Array.from({ length: 8 }, () => a.daemon.registry!.pool.query('SELECT pg_sleep(0.05)')));
  let done = false;
  const orders = Promise.allSettled(names.map((n) => a.daemon.acme.obtain(n, [n], 'dns-01', () => false))).finally(() => (done = true));
  await until('the orders under way', async () => done || Number(await pg.sql(`SELECT count(*) FROM certificate_orders`)) > 0, 10_000, 5);
  const answers: number[] = [];
  while (!done) {
    answers.push((await api(a, 'GET', '/servers', { key: made.json.api_key })).status);
    assert.ok(b.daemon.registry!.placements.host('host-a')?.up, 'A stays up as B sees it');
  }
  const settled = await orders;
  console.log(`    8 orders: ${answers.length} authenticated requests on A meanwhile`);
  assert.equal(
    settled.map((x) => (x.status === 'fulfilled' ? 'ok' : String(x.reason))),
    Array(8).fill('ok'),
  );
  assert.ok(
    answers.every((s) => s === 200),
    answers.join(' '),
  );
  for (const n of names) assert.is(ordered(a, n), 1, n);
  assert.ok(a.daemon.registry!.up);
});

test('registry down: ordering and claiming answer 503 registry_unavailable; both edges keep serving what they loaded', async () => {
  const srv = await api(a, 'POST', '/create', { body: {} });
  assert.is(srv.status, 200, srv.text);
  assert.ok(await a.daemon.billing.credit(a.daemon.store.servers.get(srv.json.id)!.accountId, 5, 'test:shared:down'));
  const before = await served(b, `api.${DOMAIN}`);
  await pg.halt();
  try {
    const name = `later.${DOMAIN}`;
    const err = await a.daemon.acme
      .obtain(name, [name], 'dns-01', () => false)
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.ok(isAppError(err) && err.code === 'registry_unavailable', String(err));
    assert.is(ordered(a, name), 0);
    const claim = await api(a, 'POST', `/servers/${srv.json.id}/domains`, { key: srv.json.api_key, body: { domain: 'blog.customer.test' } });
    assert.is(claim.status, 503, claim.text);
    assert.is(claim.json.error, 'registry_unavailable');
    assert.is(a.daemon.store.domains.get('blog.customer.test'), undefined, 'nothing written here');
    assert.is((await served(b, `api.${DOMAIN}`)).serial, before.serial);
    assert.is((await served(a, `api.${DOMAIN}`)).serial, before.serial);
  } finally {
    await pg.start();
  }
});

test.run();
