// Recovery of a dead host's servers (issue 38 item 3): three hosts on a real PostgreSQL registry
// with their checkpoints in a real S3 store (Ceph RGW, test/helpers/s3.ts), cluster.recoverAfter
// 5 s. host-a and host-b run in this process; host-c is the real daemon as a child process
// (ProcDaemon), so it can be killed with SIGKILL. On host-c:
//   - `sleeper`: files written, then put to sleep (checkpointed at sleep);
//   - `woken`: the same, then woken and running, a file written after its checkpoint (its last
//     activity is newer than its newest checkpoint);
//   - `bare`: running, never checkpointed.
// host-c is killed with SIGKILL, its servers' containers with it (the machine died), and its data
// dir taken away. After recoverAfter, `sleeper` and `woken` answer through host-a's and host-b's
// edges with byte-identical files (sha256), on two different hosts (spread by room); `woken`'s
// /var/log/rootbox.log says what was lost and its later file is not there; `bare` is not made up
// empty: it stays placed on host-c and `cluster status` lists it unrecoverable. `cluster recover`
// is refused for a host whose lease runs. host-c restarted with its old data dir runs none of
// the recovered servers (its stale copies removed, or kept aside when they held unsaved writes).

import { randomBytes } from 'node:crypto';
import { existsSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import { until } from '../helpers/wait.js';
import type { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { get } from '../registry/fixtures/clients.js';
import { startS3Cluster, type S3Cluster } from '../registry/fixtures/s3cluster.js';
import { api } from '../registry/fixtures/twohosts.js';

const RECOVER_AFTER = '5s';

let cl: S3Cluster;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let c: ProcDaemon;
interface Srv {
  id: string;
  slug: string;
  key: string;
  page: Buffer;
  sha: string;
}
const srv: Record<'sleeper' | 'woken' | 'bare', Srv> = {} as never;

const env = (dataDir: string) => ({ ...process.env, ROOTBOX_DATA_DIR: dataDir, ROOTBOX_REGISTRY: pg.url });
const exec = async (via: { http: number }, s: Srv, command: string) => {
  const r = await api(via, 'POST', `/servers/${s.id}/exec`, { key: s.key, body: { command, timeout: 120 } });
  assert.is(r.status, 200, `${command}: ${r.text}`);
  assert.is(r.json.exit_code, 0, `${command}: ${r.json.stderr}`);
  return String(r.json.stdout);
};
/** Holds `s` awake with commands that last until host-c dies (their failure then is expected). */
const holding: Promise<unknown>[] = [];
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
const placement = async (id: string) => (await pg.sql(`SELECT host FROM placements WHERE server_id = '${id}'`)).trim();

test.before(async () => {
  try {
    await setUp();
  } catch (e) {
    console.error('set-up failed:', e);
    for (const l of c?.logs ?? [])
      if (l.level === 'warn' || l.level === 'error' || /checkpoint|sleep/i.test(String(l.msg))) console.error('host-c:', JSON.stringify(l).slice(0, 600));
    throw e;
  }
});

async function setUp(): Promise<void> {
  const inProcess = { proxy: { idleTimeout: 600_000, wakeTimeout: '30s' } };
  cl = await startS3Cluster(
    [
      { name: 'host-a', settings: inProcess },
      { name: 'host-b', settings: inProcess },
      { name: 'host-c', child: true, settings: { proxy: { idleTimeout: '2s', idleCheckInterval: '200ms' } } },
    ],
    { cluster: { recoverAfter: RECOVER_AFTER } },
  );
  ({ pg } = cl);
  a = cl.daemon('host-a');
  b = cl.daemon('host-b');
  c = cl.child('host-c');
  for (const name of ['sleeper', 'woken', 'bare'] as const) {
    const slug = `rc${name.slice(0, 2)}${randomBytes(3).toString('hex')}`;
    const r = await api(c, 'POST', '/create', { body: { subdomains: [slug] } });
    assert.is(r.status, 200, r.text);
    const s: Srv = { id: r.json.id, slug, key: r.json.api_key, page: randomBytes(3000), sha: '' };
    assert.is(await placement(s.id), 'host-c', `${name} is made on host-c`);
    // bare never sleeps (so it is never checkpointed): a command holds it awake until host-c dies
    if (name === 'bare') holdAwake(s);
    const page = s.page.toString('base64');
    await exec(c, s, `mkdir -p /root/www && echo ${page} | base64 -d > /root/www/index.html && head -c 8000000 /dev/urandom > /root/data && sync`);
    s.sha = (await exec(c, s, 'sha256sum /root/data | cut -d" " -f1')).trim();
    srv[name] = s;
  }
  // idle, they go to sleep: checkpointed at sleep
  for (const s of [srv.sleeper, srv.woken])
    await until(
      `${s.slug} checkpointed at sleep`,
      async () => ((await a.daemon.hosting.core.checkpoints!.engine.list(s.id)).length ? true : undefined),
      60_000,
      200,
    );
  holdAwake(srv.woken);
  // woken, and a file written after its checkpoint: what the recovery loses
  await exec(c, srv.woken, 'echo later > /root/later && sync');
  // host-c's activity report says it ran after its checkpoint
  const checkpointAt = (await a.daemon.hosting.core.checkpoints!.engine.list(srv.woken.id))[0].createdAt;
  await until(
    'host-c reports woken running after its checkpoint',
    async () => (Number((await pg.sql(`SELECT active_at FROM server_activity WHERE server_id = '${srv.woken.id}'`)).trim()) > checkpointAt ? true : undefined),
    30_000,
    200,
  );
  assert.is((await a.daemon.hosting.core.checkpoints!.engine.list(srv.bare.id)).length, 0, 'bare has no checkpoint');
}

test.after(async () => {
  await cl?.stop();
});

test('cluster recover is refused for a host whose lease runs, and changes nothing', async () => {
  const r = await adminCli(['cluster', 'recover', 'host-c'], env(a.dataDir));
  assert.is(r.code, 1, r.stdout);
  assert.match(r.stderr, /host-c's lease still runs/);
  const unknown = await adminCli(['cluster', 'recover', 'host-nowhere'], env(a.dataDir));
  assert.is(unknown.code, 1, unknown.stdout);
  assert.match(unknown.stderr, /no other host host-nowhere/);
  for (const s of Object.values(srv)) assert.is(await placement(s.id), 'host-c');
});

test('host-c killed with SIGKILL and its data dir gone: after recoverAfter its checkpointed servers answer through the other hosts, byte for byte', async () => {
  const gone = `${c.dataDir}.gone`;
  await c.kill();
  // the machine died: its servers with it
  const runcRoot = join(c.dataDir, 'runc');
  const list = await run('runc', ['--root', runcRoot, 'list', '-q']);
  for (const id of list.stdout.split('\n').filter(Boolean)) await run('runc', ['--root', runcRoot, 'kill', '--all', id, 'KILL']);
  renameSync(c.dataDir, gone);
  const t0 = Date.now();
  try {
    for (const s of [srv.sleeper, srv.woken])
      await until(`${s.slug} recovered`, async () => ((await placement(s.id)) !== 'host-c' ? true : undefined), 90_000, 200);
    console.log(`  recovered ${Date.now() - t0} ms after the kill (recoverAfter ${RECOVER_AFTER})`);
    const holders = new Set<string>();
    for (const s of [srv.sleeper, srv.woken]) {
      const host = await placement(s.id);
      holders.add(host);
      const holder = host === 'host-a' ? a : b;
      assert.ok(holder.daemon.store.servers.get(s.id), `${host}'s store has ${s.slug}`);
      for (const via of [a, b]) {
        const g = await get(via, `${s.slug}.localhost`, '/index.html');
        assert.is(g.status, 200, `${s.slug} through ${via.cfg.cluster.host}: ${g.status} ${g.body.subarray(0, 200).toString()}`);
        assert.ok(g.body.equals(s.page), `${s.slug}'s page byte for byte through ${via.cfg.cluster.host}`);
      }
      for (const via of [a, b])
        assert.is((await exec(via, s, 'sha256sum /root/data | cut -d" " -f1')).trim(), s.sha, `${s.slug}'s file through ${via.cfg.cluster.host}`);
    }
    assert.is(holders.size, 2, `spread over both hosts: ${[...holders].join(', ')}`);
    // woken ran after its checkpoint: its later file is lost, and its owner is told
    assert.is((await exec(a, srv.woken, 'test -e /root/later && echo kept || echo lost')).trim(), 'lost');
    const note = await exec(a, srv.woken, 'cat /var/log/rootbox.log');
    assert.match(note, /host host-c died; this server was recovered on another host from its newest checkpoint/);
    assert.match(note, /is lost/);
    // and among its events (GET /servers/{id}/logs), through either host
    for (const via of [a, b]) {
      const logs = await api(via, 'GET', `/servers/${srv.woken.id}/logs`, { key: srv.woken.key });
      assert.is(logs.status, 200, logs.text);
      const events = logs.json.events as { source: string; message: string }[];
      assert.ok(
        events.some((e) => e.source === 'rootbox' && /^host host-c died; .* is lost/.test(e.message)),
        JSON.stringify(events),
      );
    }
    assert.not.match(await exec(a, srv.sleeper, 'cat /var/log/rootbox.log 2>/dev/null || true'), /died/, 'sleeper lost nothing: no note');
    // bare had no checkpoint: not made up empty, reported
    assert.is(await placement(srv.bare.id), 'host-c', 'bare stays placed on host-c');
    for (const d of [a, b]) assert.is(d.daemon.store.servers.getAny(srv.bare.id), undefined, `${d.cfg.cluster.host} made no empty bare`);
    const status = await adminCli(['cluster', 'status', '--json'], env(a.dataDir));
    assert.is(status.code, 0, status.stderr);
    const rows = JSON.parse(status.stdout).recoveries as {
      server_id: string;
      outcome: string;
      to_host: string | null;
      detail: string;
      lost_ms: number | null;
    }[];
    const row = (id: string) => rows.find((x) => x.server_id === id);
    assert.is(row(srv.bare.id)?.outcome, 'unrecoverable', status.stdout);
    assert.match(row(srv.bare.id)!.detail, /no checkpoint/);
    assert.is(row(srv.sleeper.id)?.outcome, 'recovered');
    assert.is(row(srv.woken.id)?.outcome, 'recovered');
    assert.ok((row(srv.woken.id)?.lost_ms ?? 0) > 0, 'woken lost what it did after its checkpoint');
    assert.is(row(srv.sleeper.id)?.lost_ms, null);
    const human = await adminCli(['cluster', 'status'], env(b.dataDir));
    assert.match(human.stdout, new RegExp(`${srv.bare.id}\\s+host-c\\s+-\\s+unrecoverable`));
    // the operator asks again: bare still cannot be recovered, nothing else moves
    const again = await adminCli(['cluster', 'recover', 'host-c'], env(b.dataDir));
    assert.is(again.code, 1, again.stdout + again.stderr);
    assert.match(again.stdout, new RegExp(`${srv.bare.id} \\(${srv.bare.slug}\\) cannot be recovered: no checkpoint`));
  } finally {
    renameSync(gone, c.dataDir);
  }
});

test('host-c restarted with its old data dir runs none of the recovered servers', async () => {
  const where = { sleeper: await placement(srv.sleeper.id), woken: await placement(srv.woken.id) };
  await c.start();
  await until(
    'host-c dropped its stale copies',
    () => c.current().some((l) => l.msg === 'stale copies of servers placed on another host removed'),
    60_000,
    200,
  );
  for (const s of [srv.sleeper, srv.woken]) {
    assert.not.ok(existsSync(join(c.dataDir, 'servers', s.id)), `host-c has no copy of ${s.slug} among its servers`);
    const list = await run('runc', ['--root', join(c.dataDir, 'runc'), 'list', '-q']);
    assert.not.ok(list.stdout.split('\n').includes(s.id), `host-c runs no ${s.slug}`);
    // through host-c's edge: the recovered copy answers
    const g = await get({ http: c.http, https: c.https, ca: '' }, `${s.slug}.localhost`, '/index.html');
    assert.is(g.status, 200, `${s.slug} through host-c`);
    assert.ok(g.body.equals(s.page));
  }
  assert.equal({ sleeper: await placement(srv.sleeper.id), woken: await placement(srv.woken.id) }, where, 'the placements stay where the recovery put them');
  console.log(`  host-c back: ${JSON.stringify(c.current().find((l) => l.msg === 'stale copies of servers placed on another host removed'))}`);
});

test.run();
