// Billing and limits across moves (issue 38 item 4): three hosts on a real PostgreSQL registry with
// their checkpoints in a real S3 store (Ceph RGW, test/helpers/s3.ts). host-a and host-b run in
// this process; the test drives their metering passes itself (every server's period charged up to
// the wall clock's now, however short, and the outbox written to the registry) while their own
// timer charges nothing (meterInterval 1h). host-c is the real daemon as a child process metering
// every second, so it can be killed with SIGKILL and come back with its old data dir.
//
// What the registry's ledger must show, server by server: its periods follow one another exactly
// (each one starts where the one before it ended, whichever host charged it) — never a period
// charged by two hosts, never one charged by none — across a running server moved A → B → A (the
// way back finds A's cursor of before), a sleeping one moved, and a drain; its egress charged once
// (bytes sent just before a move included); a server recovered from a dead host charged from its
// recovery on by its new host, and by the dead host never after it died, even once it is back
// with its old data dir. And the limits: an account at maxServersPerAccount (2) and an anonymous
// address at its cap (3) still have their servers moved, drained and recovered, after which they
// still cannot create one more — and, one server deleted, exactly one more.

import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import { until } from '../helpers/wait.js';
import { send } from '../http/contract.js';
import type { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { sh } from '../runtime/helpers/env.js';
import { get } from '../registry/fixtures/clients.js';
import { startS3Cluster, type S3Cluster } from '../registry/fixtures/s3cluster.js';
import { api } from '../registry/fixtures/twohosts.js';

const GB = 1024 ** 3;
/** Where account R (anonymous, at its max of 2 servers) was made. */
const X = '127.0.10.1';
/** The anonymous address at its cap of 3: the accounts of still, lost and keep were made from it. */
const Y = '127.0.10.2';
const BLOB = randomBytes(2 * 1024 * 1024);

let cl: S3Cluster;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let c: ProcDaemon;
interface Srv {
  id: string;
  slug: string;
  key: string;
}
/** run, nap: account R's (at its max of 2), on A; still: on A, never moved; lost: on host-c,
 *  checkpointed; keep: on host-c, never checkpointed (it stays host-c's) — each of the last three
 *  an anonymous account of its own from Y (at its cap of 3). */
const srv: Record<'run' | 'nap' | 'lost' | 'still' | 'keep', Srv> = {} as never;
let egressSent = 0;

const env = (dataDir: string) => ({ ...process.env, ROOTBOX_DATA_DIR: dataDir, ROOTBOX_REGISTRY: pg.url });
const hostOf = (name: string) => (name === 'host-a' ? a : name === 'host-b' ? b : undefined);
const placement = async (id: string) => (await pg.sql(`SELECT host FROM placements WHERE server_id = '${id}'`)).trim();

/** POST /create through `via` from address `from`, as account `key` (or a new anonymous one). */
const create = (via: { http: number }, from: string, key?: string, slug?: string) =>
  send(via.http, 'api.localhost', 'POST', '/create', {
    body: slug ? { subdomains: [slug] } : {},
    from,
    headers: key ? { authorization: `Bearer ${key}` } : {},
  });

/** One metering pass of an in-process host at the wall clock's now: every server's period since its
 *  cursor charged however short, and the outbox written to the registry. */
async function charge(d: TestDaemon): Promise<void> {
  await d.daemon.billing.meter.tick(Date.now(), 0);
  await d.daemon.billing.book.sync([]);
}
const chargeBoth = async () => (await charge(a), await charge(b));

interface Entry {
  host: string;
  from: number;
  to: number;
  ram: number;
  disk: number;
  egress: number;
}
/** The registry's usage entries of a server, in time order. */
async function entries(id: string): Promise<Entry[]> {
  const out = await pg.sql(
    `SELECT host, period_from, period_to, ram_gb_hours, disk_gb_months, egress_gb FROM ledger_entries WHERE server_id = '${id}' AND kind = 'usage' ORDER BY period_from, period_to`,
  );
  return out
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [host, from, to, ram, disk, egress] = l.split('|');
      return { host, from: Number(from), to: Number(to), ram: Number(ram), disk: Number(disk), egress: Number(egress) };
    });
}
const show = (e: Entry) => `${e.host} [${e.from}, ${e.to}]`;

/** Each period starts exactly where the one before it ended: no time charged twice, none by no host. */
function tiles(list: Entry[], what: string): void {
  assert.ok(list.length > 0, `${what}: charged at all`);
  for (let i = 1; i < list.length; i++) {
    const [p, n] = [list[i - 1], list[i]];
    assert.ok(n.from >= p.to, `${what}: ${show(n)} overlaps ${show(p)} by ${p.to - n.from} ms (charged by both)`);
    assert.ok(n.from <= p.to, `${what}: the ${n.from - p.to} ms between ${show(p)} and ${show(n)} were charged by no host`);
  }
}
const hostsOf = (list: Entry[]) => list.map((e) => e.host).filter((h, i, all) => i === 0 || all[i - 1] !== h);

/** Downloads the server's 2 MiB page through `via`'s edge (its owner charges the bytes as egress). */
async function download(via: { http: number; https: number; ca: string }, s: Srv): Promise<void> {
  const g = await get(via, `${s.slug}.localhost`, '/blob');
  assert.is(g.status, 200, `${s.slug}/blob: ${g.status}`);
  assert.ok(g.body.equals(BLOB), 'the page byte for byte');
  egressSent += g.body.length;
}

/** `rootbox servers move` on the host that runs `s`, its JSON report. */
async function move(s: Srv, fromDir: string, to: string): Promise<{ was: string; from: string; to: string }> {
  const r = await adminCli(['servers', 'move', s.id, '--to', to, '--json'], env(fromDir));
  assert.is(r.code, 0, r.stderr + r.stdout);
  return JSON.parse(r.stdout).move;
}

/** R cannot create a third server, nor anyone anonymous from Y a fourth. */
async function atLimits(when: string): Promise<void> {
  for (const via of [a, b]) {
    const more = await create(via, X, srv.run.key);
    assert.is(more.status, 403, `${when}: R's third create through ${via.cfg.cluster.host}: ${more.text}`);
    assert.is(more.json.error, 'server_limit', `${when}: ${more.text}`);
    const anon = await create(via, Y);
    assert.is(anon.status, 403, `${when}: a fourth anonymous create from Y through ${via.cfg.cluster.host}: ${anon.text}`);
    assert.is(anon.json.error, 'ip_limit', `${when}: ${anon.text}`);
  }
}

const holding: Promise<unknown>[] = [];
/** Holds `s` awake on host-c with commands that last until host-c dies (so it is never checkpointed at sleep). */
function holdAwake(s: Srv): void {
  holding.push(
    (async () => {
      for (;;) {
        const r = await api(c, 'POST', `/servers/${s.id}/exec`, { key: s.key, body: { command: 'sleep 50', timeout: 55 } }).catch(() => undefined);
        if (!r || r.status !== 200) return;
      }
    })(),
  );
}

test.before(async () => {
  try {
    await setUp();
  } catch (e) {
    for (const l of c?.logs ?? []) if (l.level === 'warn' || l.level === 'error') console.error('host-c:', JSON.stringify(l).slice(0, 600));
    throw e;
  }
});

async function setUp(): Promise<void> {
  // the test charges A's and B's periods itself
  const inProcess = { cluster: { drainRetry: '1s' }, billing: { meterInterval: '1h' }, proxy: { idleTimeout: 600_000, wakeTimeout: '30s' } };
  cl = await startS3Cluster(
    [
      { name: 'host-a', settings: inProcess },
      { name: 'host-b', settings: inProcess },
      { name: 'host-c', child: true, settings: { billing: { meterInterval: '1s' }, proxy: { idleTimeout: '2s', idleCheckInterval: '200ms' } } },
    ],
    {
      // the create rate out of the way: refused creates spend its tokens too (hosts take them a chunk at a time)
      hosting: { maxServersPerAccount: 2, anonServersPerIp: 3, rateLimit: { createsPerIpPerHour: 100_000 } },
      cluster: { recoverAfter: '5s' },
    },
  );
  ({ pg } = cl);
  a = cl.daemon('host-a');
  b = cl.daemon('host-b');
  c = cl.child('host-c');
  const made = async (via: { http: number }, from: string, key?: string): Promise<Srv> => {
    const slug = `mb${randomBytes(4).toString('hex')}`;
    const r = await create(via, from, key, slug);
    assert.is(r.status, 200, r.text);
    return { id: r.json.id as string, slug, key: (r.json.api_key as string | undefined) ?? key! };
  };
  srv.run = await made(a, X);
  srv.nap = await made(a, X, srv.run.key);
  srv.still = await made(a, Y);
  srv.lost = await made(c, Y);
  srv.keep = await made(c, Y);
  holdAwake(srv.keep);
  for (const [name, s] of Object.entries(srv))
    assert.is(await placement(s.id), name === 'lost' || name === 'keep' ? 'host-c' : 'host-a', `${name} made where it was asked`);
  const w = await sh(a.daemon.runtime, srv.run.id, 'mkdir -p /root/www && cat > /root/www/blob && sync', BLOB);
  assert.is(w.code, 0, w.err);
  // lost goes to sleep on host-c: checkpointed at sleep (recoverable)
  await until(
    'lost checkpointed at sleep',
    async () => ((await a.daemon.hosting.core.checkpoints!.engine.list(srv.lost.id)).length ? true : undefined),
    60_000,
    200,
  );
  // nap sleeps on A
  const stop = await adminCli(['servers', 'stop', srv.nap.id], env(a.dataDir));
  assert.is(stop.code, 0, stop.stderr);
  await until('nap asleep on A', () => a.daemon.runtime.get(srv.nap.id)?.state === 'sleeping', 30_000, 50);
  assert.is(a.daemon.runtime.get(srv.run.id)?.state, 'running', 'run runs');
  // every server of A metered from here on
  await charge(a);
}

test.after(async () => {
  await cl?.stop().catch((e) => console.error('cleanup:', e));
});

test('the account and the address at their limits cannot create more', async () => {
  await atLimits('before any move');
});

test('a running server moved A → B → A: metered by each host in turn, every period charged once, its egress too', async () => {
  await charge(a);
  const t0 = (await entries(srv.run.id)).at(-1)!.to;
  // bytes sent just before each move (after the host's last pass) are charged too
  await download(a, srv.run);
  assert.is((await move(srv.run, a.dataDir, 'host-b')).was, 'running');
  assert.is(b.daemon.runtime.get(srv.run.id)?.state, 'running', 'running on B');
  await charge(a); // A charges it no more
  await download(b, srv.run);
  await charge(b);
  await download(a, srv.run);
  assert.is((await move(srv.run, b.dataDir, 'host-a')).was, 'running');
  await chargeBoth();
  await download(b, srv.run);
  await charge(a);
  const list = (await entries(srv.run.id)).filter((e) => e.to > t0);
  tiles(list, 'run');
  assert.equal(hostsOf(list), ['host-a', 'host-b', 'host-a'], list.map(show).join(' '));
  const onB = list.filter((e) => e.host === 'host-b');
  assert.ok(onB.reduce((n, e) => n + e.ram, 0) > 0, `RAM metered on B while it ran there: ${onB.map((e) => `${show(e)} ${e.ram}`).join(', ')}`);
  // as long as a server that never moved, over the same passes of A
  const still = (await entries(srv.still.id)).filter((e) => e.to > t0);
  tiles(still, 'still');
  const span = (l: Entry[]) => l.reduce((n, e) => n + (e.to - e.from), 0);
  assert.is(list.at(-1)!.to, still.at(-1)!.to, 'both charged up to the same last pass');
  assert.is(span(list), span(still), 'charged as many seconds as the server that never moved');
  const egress = (await entries(srv.run.id)).reduce((n, e) => n + e.egress, 0) * GB;
  assert.ok(egress >= egressSent, `egress charged ${Math.round(egress)} bytes of the ${egressSent} sent: every download counted`);
  assert.ok(egress <= egressSent * 1.05 + 256 * 1024, `egress charged ${Math.round(egress)} bytes for ${egressSent} sent: none twice`);
  console.log(`  run: ${list.length} periods on ${hostsOf(list).join(' → ')}, egress ${Math.round(egress)} bytes charged for ${egressSent} sent`);
});

test('a sleeping server moved A → B: its periods follow one another across the hosts, no RAM charged', async () => {
  await charge(a);
  const t0 = (await entries(srv.nap.id)).at(-1)!.to;
  assert.is((await move(srv.nap, a.dataDir, 'host-b')).was, 'sleeping');
  await chargeBoth();
  await charge(b);
  const list = (await entries(srv.nap.id)).filter((e) => e.to > t0);
  tiles(list, 'nap');
  assert.equal(hostsOf(list), ['host-a', 'host-b'], list.map(show).join(' '));
  assert.ok(
    list.every((e) => e.ram === 0),
    'asleep: no RAM',
  );
  await atLimits('after the moves');
});

test('a drain of host-b moves nap off it, metered on: still no more creates than the limits', async () => {
  await chargeBoth();
  const t0 = (await entries(srv.nap.id)).at(-1)!.to;
  const d = await adminCli(['cluster', 'drain', 'host-b'], env(a.dataDir));
  assert.is(d.code, 0, d.stderr + d.stdout);
  try {
    await until(
      'nap moved off host-b',
      async () => ((await placement(srv.nap.id)) !== 'host-b' && !b.daemon.store.servers.getAny(srv.nap.id) ? true : undefined),
      90_000,
      200,
    );
  } finally {
    const u = await adminCli(['cluster', 'undrain', 'host-b'], env(a.dataDir));
    assert.is(u.code, 0, u.stderr + u.stdout);
  }
  const to = await placement(srv.nap.id);
  console.log(`  drain: nap moved to ${to}`);
  await atLimits('after the drain');
  if (to === 'host-c') {
    await until('host-c charged nap', async () => ((await entries(srv.nap.id)).some((e) => e.host === 'host-c') ? true : undefined), 30_000, 200);
    await charge(b);
  } else await chargeBoth();
  const list = (await entries(srv.nap.id)).filter((e) => e.to > t0);
  tiles(list, 'nap');
  assert.equal(hostsOf(list), ['host-b', to], list.map(show).join(' '));
});

test('host-c killed: its servers recovered elsewhere are charged there from their recovery on, and never again by host-c, back with its old data dir', async () => {
  const recovered = [srv.lost, ...((await placement(srv.nap.id)) === 'host-c' ? [srv.nap] : [])];
  const killedAt = Date.now();
  await c.kill();
  // the machine died: its servers with it
  const runcRoot = join(c.dataDir, 'runc');
  const list = await run('runc', ['--root', runcRoot, 'list', '-q']);
  for (const id of list.stdout.split('\n').filter(Boolean)) await run('runc', ['--root', runcRoot, 'kill', '--all', id, 'KILL']);
  const seen = new Map<string, number>();
  for (const s of recovered) {
    // placed elsewhere and committed there (its meter opened before the commit)
    await until(`${s.slug} recovered`, async () => (hostOf(await placement(s.id))?.daemon.store.servers.get(s.id) ? true : undefined), 90_000, 200);
    seen.set(s.id, Date.now());
  }
  await atLimits('after the recovery');
  await chargeBoth();
  const restartedAt = Date.now();
  await c.start();
  await until(
    'host-c dropped its stale copies',
    () => c.current().some((l) => l.msg === 'stale copies of servers placed on another host removed'),
    60_000,
    200,
  );
  const dropped = Date.now();
  // host-c meters again (keep stayed its own): two of its passes after the drop reached the registry
  await until(
    'host-c charged keep twice since it dropped its stale copies',
    async () => ((await entries(srv.keep.id)).filter((e) => e.host === 'host-c' && e.from >= dropped).length >= 2 ? true : undefined),
    30_000,
    200,
  );
  assert.ok(
    (await entries(srv.keep.id)).some((e) => e.host === 'host-c' && e.from >= restartedAt),
    'host-c meters what it still runs',
  );
  await chargeBoth();
  for (const s of recovered) {
    const all = await entries(s.id);
    const before = all.filter((e) => e.host === 'host-c');
    const after = all.filter((e) => e.host !== 'host-c' && e.to > killedAt);
    const late = before.filter((e) => e.to > killedAt);
    assert.equal(late.map(show), [], `${s.slug}: host-c charged nothing after it died`);
    assert.ok(after.length >= 2, `${s.slug}: its new host charges it: ${all.map(show).join(' ')}`);
    tiles(after, s.slug);
    assert.ok(after[0].from >= killedAt, `${s.slug}: charged from its recovery on`);
    assert.ok(
      after[0].from <= seen.get(s.id)!,
      `${s.slug}: charged from the recovery, not from its new host's next pass (${after[0].from} > ${seen.get(s.id)})`,
    );
    assert.ok(hostOf(after[0].host)?.daemon.store.servers.get(s.id), `${s.slug}: charged by the host that has it`);
  }
  await atLimits('host-c back');
});

test('a server of the account and one from the address deleted: exactly one more create each, then the limits again', async () => {
  const made: { id: string; key: string }[] = [];
  for (const [s, from, key] of [
    [srv.nap, X, srv.run.key],
    [srv.lost, Y, undefined],
  ] as const) {
    const del = await api(a, 'DELETE', `/servers/${s.id}`, { key: s.key });
    assert.is(del.status, 200, del.text);
    const one = await create(b, from, key);
    assert.is(one.status, 200, `one more after ${s.slug} was deleted: ${one.text}`);
    made.push({ id: one.json.id as string, key: (one.json.api_key as string | undefined) ?? key! });
  }
  await atLimits('the freed places taken again');
  for (const m of made) assert.is((await api(a, 'DELETE', `/servers/${m.id}`, { key: m.key })).status, 200);
});

test.run();
