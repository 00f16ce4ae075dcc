// A move's target between its placement write and its answer (issue 38: review findings H3, H4,
// M1, M7). Two hosts on a real PostgreSQL registry with their checkpoints in a real S3 store
// (Ceph RGW): host-a runs in this process (its runtime's boot watched), host-b is the real daemon
// as a child process (ProcDaemon) that a test hook (ROOTBOX_TEST_KILL_AT) kills with SIGKILL at
// an exact point of its side of a move. Servers run real runc containers.
//   - M1: the target makes a moved server asleep and boots it only once it is placed there and
//     committed, and only when it ran on the source (a sleeping one is never booted by a move);
//   - H4: the registry halted once the target was asked: the source keeps the server stopped (its
//     requests waiting) until the registry answers, then runs it again;
//   - H3: the target killed after its placement write and before its local commit: restarted, it
//     makes the server again from its checkpoint and keeps it — no tombstone, its files there;
//   - M7: the target killed right after its local commit: restarted, it finishes the takeover
//     (its exposed port, its own domain, running again as on the source).

import { randomBytes } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import type { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { get } from '../registry/fixtures/clients.js';
import { startS3Cluster, type S3Cluster } from '../registry/fixtures/s3cluster.js';
import { api } from '../registry/fixtures/twohosts.js';
import type { RuntimeRecord } from '../../src/store/index.js';
import { OUTCOME_UNKNOWN } from '../../src/moves/source.js';

const RUN_SH = `#!/bin/bash\ncd /root/www && exec python3 -m http.server 80\n`;

let cl: S3Cluster;
let pg: TestPostgres;
let a: TestDaemon;
let b: ProcDaemon;
interface Srv {
  id: string;
  slug: string;
  key: string;
  page: string;
  sha: string;
}
let x: Srv;
let y: Srv;
const savedKillAt = process.env.ROOTBOX_TEST_KILL_AT;
/** host-a's boots of a server: whether its record was committed (visible) at that moment. */
const boots: { id: string; committed: boolean }[] = [];

const envOf = (dataDir: string) => ({ ...process.env, ROOTBOX_DATA_DIR: dataDir, ROOTBOX_REGISTRY: pg.url });
const move = (from: string, s: Srv, to: string) => adminCli(['servers', 'move', s.id, '--to', to, '--json'], envOf(from));
const placement = async (id: string) => (await pg.sql(`SELECT host || ' ' || (lost_at IS NOT NULL) FROM placements WHERE server_id = '${id}'`)).trim();
const exec = async (via: { http: number }, s: Srv, command: string) => {
  const r = await api(via, 'POST', `/servers/${s.id}/exec`, { key: s.key, body: { command, timeout: 120 } });
  assert.is(r.status, 200, `${command}: ${r.text}`);
  assert.is(r.json.exit_code, 0, `${command}: ${r.json.stderr}`);
  return String(r.json.stdout);
};
const page = async (via: Pick<TestDaemon, 'http' | 'https' | 'ca'>, s: Srv) => (await get(via, `${s.slug}.localhost`, '/')).body.toString();
/** host-b (re)started, killing itself at `killAt` of its side of a move (none: unset). */
async function startB(killAt?: string): Promise<void> {
  await b.stop();
  if (killAt) process.env.ROOTBOX_TEST_KILL_AT = killAt;
  else delete process.env.ROOTBOX_TEST_KILL_AT;
  try {
    await b.start();
  } finally {
    delete process.env.ROOTBOX_TEST_KILL_AT;
  }
  await until('host-a sees host-b up', () => a.daemon.registry!.placements.host('host-b')?.up, 30_000, 100);
  // and reaches its new run over the channel (not a session to the run before, nor one that failed a moment ago)
  await until(
    'host-a reaches host-b over the channel',
    () => {
      const adv = a.daemon.registry!.placements.host('host-b')!.advertise;
      a.daemon.channel!.probe('host-b', adv);
      return a.daemon.channel!.answering('host-b', adv);
    },
    30_000,
    200,
  );
}
/** host-b as the clients see it (its ports change at each start). */
const bView = {
  get http() {
    return b.http;
  },
  get https() {
    return b.https;
  },
  ca: '',
};

test.before(async () => {
  try {
    await setUp();
  } catch (e) {
    for (const l of b?.logs ?? []) if (l.level === 'warn' || l.level === 'error' || l.stderr) console.error('host-b:', JSON.stringify(l).slice(0, 600));
    throw e;
  }
});

async function setUp(): Promise<void> {
  const settings = { proxy: { idleTimeout: 600_000, wakeTimeout: '30s' } };
  cl = await startS3Cluster(['host-a', { name: 'host-b', child: true }], settings);
  ({ pg } = cl);
  a = cl.daemon('host-a');
  b = cl.child('host-b');
  const rt = a.daemon.runtime as unknown as { boot(rec: RuntimeRecord, meanwhile?: () => void): Promise<void> };
  const boot = rt.boot.bind(rt);
  rt.boot = (rec, meanwhile) => (boots.push({ id: rec.id, committed: !!a.daemon.store.servers.get(rec.id) }), boot(rec, meanwhile));
  await until('host-a sees host-b up', () => a.daemon.registry!.placements.host('host-b')?.up, 30_000, 100);
  // x and y made on host-b, each with a page its app serves and a file
  const make = async (name: string): Promise<Srv> => {
    const slug = `cm${name}${randomBytes(3).toString('hex')}`;
    const r = await api(bView, 'POST', '/create', { body: { subdomains: [slug] } });
    assert.is(r.status, 200, r.text);
    const s: Srv = { id: r.json.id, slug, key: r.json.api_key, page: randomBytes(12).toString('hex'), sha: '' };
    await exec(
      bView,
      s,
      `mkdir -p /root/www && echo ${s.page} > /root/www/index.html && printf '%s' '${RUN_SH}' > /root/run.sh && chmod +x /root/run.sh && head -c 4000000 /dev/urandom > /root/data && sync`,
    );
    s.sha = (await exec(bView, s, 'sha256sum /root/data | cut -d" " -f1')).trim();
    return s;
  };
  x = await make('x');
  y = await make('y');
  // x's app (run.sh) runs from its next boot on
  const restart = await api(bView, 'POST', `/servers/${x.id}/restart`, { key: x.key });
  assert.is(restart.status, 200, restart.text);
  for (const s of [x, y]) assert.is(await placement(s.id), 'host-b false');
}

test.after(async () => {
  await cl?.stop();
  if (savedKillAt === undefined) delete process.env.ROOTBOX_TEST_KILL_AT;
  else process.env.ROOTBOX_TEST_KILL_AT = savedKillAt;
});

test('M1: a sleeping server moved to host-a is never booted there; a running one is booted only once it is committed there', async () => {
  // y asleep on host-b, x running there (its app on port 80)
  const stop = await adminCli(['servers', 'stop', y.id], envOf(b.dataDir));
  assert.is(stop.code, 0, stop.stderr);
  await until('x serves its page on host-b', async () => ((await page(bView, x)).trim() === x.page ? true : undefined), 60_000, 200);
  boots.length = 0;
  const sleeping = await move(b.dataDir, y, 'host-a');
  assert.is(sleeping.code, 0, sleeping.stderr + sleeping.stdout);
  const ofY = boots.filter((e) => e.id === y.id);
  const yState = a.daemon.runtime.get(y.id)?.state;
  boots.length = 0;
  const running = await move(b.dataDir, x, 'host-a');
  assert.is(running.code, 0, running.stderr + running.stdout);
  const ofX = boots.filter((e) => e.id === x.id);
  assert.equal(ofY, [], 'no boot of a sleeping server on the target');
  assert.is(yState, 'sleeping');
  assert.is(await placement(y.id), 'host-a false');
  assert.equal(ofX, [{ id: x.id, committed: true }], 'booted once, after its commit on the target');
  assert.is(a.daemon.runtime.get(x.id)?.state, 'running');
  assert.is((await page(a, x)).trim(), x.page);
});

test('H4: the registry halted once the target was asked: the source keeps the server stopped until the registry answers, then runs it again', async () => {
  assert.is(a.daemon.runtime.get(x.id)?.state, 'running');
  const seenA = a.logs.length;
  const seenB = b.logs.length;
  // host-a's reads of the placement after the target was asked (names.ts startAt), counted
  const names = a.daemon.registry!.names;
  const startAt = names.startAt;
  let reads = 0;
  names.startAt = (...args: Parameters<typeof startAt>) => (reads++, startAt.apply(names, args));
  const moving = move(a.dataDir, x, 'host-b');
  await until('host-b is asked', () => b.logs.slice(seenB).some((l) => l.msg === 'taking a server moved here' && l.server === x.id), 120_000, 5);
  await pg.halt();
  try {
    // host-b cannot take it (and cannot tell whether it did); host-a cannot read where it is
    await until(
      'host-a tried to read the placement twice, or gave the move up',
      () =>
        (a.logs.slice(seenA).some((l) => l.msg === OUTCOME_UNKNOWN) && reads >= 2) ||
        a.logs.slice(seenA).some((l) => l.msg === 'move failed; the server stays here'),
      120_000,
      20,
    );
    assert.not.ok(
      a.logs.slice(seenA).some((l) => l.msg === 'move failed; the server stays here'),
      'no restart on the source without the registry’s word',
    );
    assert.is.not(a.daemon.runtime.get(x.id)?.state, 'running', 'stopped on the source while the registry cannot be read');
  } finally {
    await pg.start();
  }
  const r = await moving;
  names.startAt = startAt;
  assert.is(r.code, 1, r.stdout);
  await until('x runs on host-a again', () => a.daemon.runtime.get(x.id)?.state === 'running', 60_000, 50).catch((e) => {
    for (const l of a.logs.slice(seenA)) if (l.server === x.id || l.level === 'error') console.error('host-a:', JSON.stringify(l).slice(0, 500));
    throw e;
  });
  assert.is(await placement(x.id), 'host-a false');
  assert.is((await page(a, x)).trim(), x.page);
  // host-b's unfinished copy, whose fate it could not read, goes once the registry answers
  await until(
    'host-b removes its unfinished copy',
    () => b.logs.some((l) => l.msg === 'a server handed over here is placed elsewhere: its unfinished copy here is removed' && l.server === x.id),
    60_000,
    100,
  );
});

test('H3: host-b killed after its placement write, before its local commit: restarted, it has the server from its checkpoint, no tombstone', async () => {
  await startB('move-taken');
  const pid = b.child!.pid;
  const r = await move(a.dataDir, y, 'host-b');
  const said = () =>
    `the move: ${r.code} ${r.stderr.slice(0, 400)}; host-b: ${b
      .current()
      .filter((l) => l.level === 'warn' || l.level === 'error')
      .map((l) => JSON.stringify(l).slice(0, 300))
      .join(' | ')}`;
  await until(`host-b killed itself (${said()})`, () => !b.running, 60_000, 50);
  assert.is(r.code, 0, `the source finds the placement on host-b (the answer lost): ${r.stderr}${r.stdout}`);
  assert.is(a.daemon.store.servers.get(y.id), undefined, 'host-a deleted its copy');
  assert.is(await placement(y.id), 'host-b false');
  await startB();
  assert.ok(b.child!.pid !== pid);
  await until(
    'host-b has y again',
    async () => ((await api(bView, 'GET', `/servers/${y.id}`, { key: y.key })).status === 200 ? true : undefined),
    120_000,
    200,
  );
  assert.is(await placement(y.id), 'host-b false');
  assert.is(await pg.sql(`SELECT count(*) FROM changes WHERE key = '${y.id}' AND payload IS NULL`), '0', 'no tombstone');
  assert.is((await exec(bView, y, 'sha256sum /root/data | cut -d" " -f1')).trim(), y.sha, 'its files');
  assert.is((await page(a, y)).trim(), y.page, 'served through host-a');
});

test('M7: host-b killed right after its local commit: restarted, it finishes the takeover — its exposed port, its own domain, running again', async () => {
  const exp = await api(a, 'POST', '/expose', { key: x.key, body: { server: x.id, port: 80 } });
  assert.is(exp.status, 200, exp.text);
  const domain = `www.${x.slug}.example`;
  const accountId = a.daemon.store.servers.get(x.id)!.accountId;
  assert.ok(await a.daemon.registry!.shared.claimDomain({ domain, serverId: x.id, accountId, state: 'active' }));
  const at = Date.now();
  a.daemon.store.domains.claim({ domain, serverId: x.id, accountId, token: 'test', state: 'active', createdAt: at, activeAt: at }, () => true);
  a.daemon.hosting.core.domains.load();
  await startB('move-committed');
  const r = await move(a.dataDir, x, 'host-b');
  await until('host-b killed itself', () => !b.running, 60_000, 50);
  assert.is(r.code, 0, `${r.stderr}${r.stdout}`);
  await startB();
  await until(
    'x runs on host-b with its port exposed again',
    async () => {
      const v = await api(bView, 'GET', `/servers/${x.id}`, { key: x.key });
      return v.status === 200 && v.json.state === 'running' && v.json.exposed_ports.length === 1 ? v.json : undefined;
    },
    120_000,
    200,
  );
  const v = await api(bView, 'GET', `/servers/${x.id}`, { key: x.key });
  assert.is(v.json.exposed_ports[0].container_port, 80);
  const d = await api(bView, 'GET', `/servers/${x.id}/domains`, { key: x.key });
  assert.is(d.status, 200, d.text);
  assert.equal(
    d.json.domains.map((e: { domain: string; state: string }) => `${e.domain} ${e.state}`),
    [`${domain} active`],
    'its own domain kept on host-b',
  );
  assert.is((await get(bView, domain, '/')).body.toString().trim(), x.page, 'its domain served by host-b');
  const port = Number(v.json.exposed_ports[0].public.split(':').pop());
  assert.is((await (await fetch(`http://127.0.0.1:${port}/`)).text()).trim(), x.page, 'the new public port reaches the app');
});

test.run();
