// Draining a host that holds 20 sleeping servers (issue 38's test "drain a host with 20 servers"):
// three daemons on a real PostgreSQL registry with their checkpoints in a real S3 store (Ceph RGW,
// test/helpers/s3.ts). host-a holds 20 real runc servers (anonymous, 256 MiB sparse disks), each
// with its own page and 1 MB of random bytes in /root/www, asleep (checkpointed at sleep: host-a's
// idle timeout is short). `rootbox cluster drain host-a` (run on host-b): `cluster status` shows the
// drain's progress as it goes (moved + left = 20 but for the moves under way, moved never going
// back, none failed) while a
// create through host-a's API is made on another host; at the end every server is placed on
// host-b or host-c (both get some), is no longer on host-a, and serves its own page and file
// (sha256) through every edge without a wake. `cluster undrain host-a` reopens it to creates.

import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { startS3, type TestS3 } from '../helpers/s3.js';
import { until } from '../helpers/wait.js';
import { get } from '../registry/fixtures/clients.js';
import { api, clusterOpts, startClusterRegistry } from '../registry/fixtures/twohosts.js';

const N = 20;
let s3: TestS3;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let c: TestDaemon;
type Srv = { id: string; slug: string; key: string; page: string; sha: string; wrote?: string };
const servers: Srv[] = [];
const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };

const env = (d: Pick<TestDaemon, 'dataDir'>) => ({ ...process.env, ROOTBOX_DATA_DIR: d.dataDir, ROOTBOX_REGISTRY: pg.url });
const placed = async (id: string) => (await pg.sql(`SELECT host FROM placements WHERE server_id = '${id}'`)).trim();
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
type StatusHost = { name: string; servers: number; drain: { moved: number; failed: Record<string, { why: string; attempts: number }> } | null };
const status = async () => {
  const r = await adminCli(['cluster', 'status', '--json'], env(b));
  assert.is(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as { hosts: StatusHost[] }).hosts.find((h) => h.name === 'host-a')!;
};

/** Why `edge` answered `got` for `s` (placed on `h`) instead of its own page: what the target has
 *  on its disk, which checkpoint the move shipped (reused or taken) and host-a's checkpoints of it. */
function explain(s: Srv, edge: TestDaemon, h: string, got: string): string {
  const on = h === 'host-b' ? b : c;
  const rt = on.daemon.runtime.get(s.id);
  const www = rt ? join(rt.rootfs, 'root', 'www') : '';
  let has: string;
  try {
    const page = existsSync(join(www, 'index.html')) ? JSON.stringify(readFileSync(join(www, 'index.html'), 'utf8').slice(0, 80)) : 'no index.html';
    has = `/root/www [${readdirSync(www).join(', ')}], ${page}`;
  } catch (e) {
    has = `/root/www unreadable (${(e as NodeJS.ErrnoException).code})`;
  }
  const mine = (l: Record<string, unknown>) => l.server === s.id || l.id === s.id;
  const moved = a.logs.filter((l) => mine(l) && l.msg === 'server moved').map((l) => ({ checkpoint: l.checkpoint, reused: l.reused, to: l.to }));
  const autos = a.logs.filter((l) => mine(l) && l.msg === 'automatic checkpoint').map((l) => ({ at: l.time, checkpoint: l.checkpoint }));
  const cps = on.daemon.store.checkpoints.list(s.id).map((k) => ({ id: k.id, kind: k.kind, comment: k.comment, writtenAt: k.writtenAt }));
  return (
    `${s.slug} (${s.id}) through ${edge.cfg.cluster.host} answered ${JSON.stringify(got.slice(0, 80))}, not its own page. ` +
    `Placed on ${h}: its runtime ${rt?.state ?? 'absent'}, ${has}; its checkpoint records ${JSON.stringify(cps)}; ` +
    `host-a moved it ${JSON.stringify(moved)}; its files were written by ${s.wrote}, its automatic checkpoints there ${JSON.stringify(autos)}`
  );
}

test.before(async () => {
  s3 = await startS3();
  const bucket = await s3.bucket();
  Object.assign(process.env, s3.env);
  pg = await startClusterRegistry();
  const checkpoints = { store: `s3://${bucket}/cluster`, s3: { endpoint: s3.endpoint, connectTimeout: '2s', timeout: '20s', maxAttempts: 2 } };
  const host = async (name: string, proxy: Record<string, unknown>) => {
    const o = clusterOpts(pg, name, await freePort());
    return startTestDaemon({
      ...o,
      hosting: { ...o.hosting, anonServersPerIp: N },
      cluster: { ...o.cluster, drainRetry: '1s' },
      checkpoints,
      proxy,
    });
  };
  // host-a's servers fall asleep (checkpointed at sleep) soon after their files are written
  a = await host('host-a', { idleTimeout: '2s', idleCheckInterval: '200ms', wakeTimeout: '30s' });
  b = await host('host-b', { idleTimeout: 600_000, wakeTimeout: '30s' });
  c = await host('host-c', { idleTimeout: 600_000, wakeTimeout: '30s' });
  for (let i = 0; i < N; i++) {
    const slug = `dt${i}${randomBytes(3).toString('hex')}`;
    const r = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
    assert.is(r.status, 200, r.text);
    servers.push({ id: r.json.id, slug, key: r.json.api_key, page: `page of ${slug} ${randomBytes(8).toString('hex')}\n`, sha: '' });
    assert.is(await placed(r.json.id), 'host-a');
  }
  await Promise.all(
    servers.map(async (s) => {
      const command = `mkdir -p /root/www && echo -n '${s.page}' > /root/www/index.html && head -c 1000000 /dev/urandom > /root/www/data.bin && sync && sha256sum /root/www/data.bin`;
      const w = await api(a, 'POST', `/servers/${s.id}/exec`, { key: s.key, body: { command, timeout: 120 } });
      assert.is(w.status, 200, w.text);
      assert.is(w.json.exit_code, 0, String(w.json.stderr));
      s.sha = String(w.json.stdout).split(' ')[0];
      s.wrote = new Date().toISOString();
    }),
  );
  const cps = a.daemon.hosting.core.checkpoints!.engine;
  await until(
    'every server of host-a asleep and checkpointed',
    async () => {
      for (const s of servers) if (a.daemon.runtime.get(s.id)?.state !== 'sleeping' || !(await cps.list(s.id)).length) return false;
      return true;
    },
    180_000,
    250,
  );
  // servers whose automatic checkpoint (queued at a sleep before their exec) was taken while their exec wrote
  const early = servers.filter((s) => a.logs.some((l) => l.server === s.id && l.msg === 'automatic checkpoint' && String(l.time) < s.wrote!));
  console.log(`  ${early.length} of ${N} servers checkpointed before their exec returned`);
});

test.after(async () => {
  await c?.stop();
  await b?.stop();
  await a?.stop();
  await pg?.stop();
  await s3?.stop();
  for (const [k, v] of [
    ['AWS_ACCESS_KEY_ID', saved.id],
    ['AWS_SECRET_ACCESS_KEY', saved.secret],
  ] as const)
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
});

test('drain host-a: status shows the progress, host-a takes no create, every server ends on host-b or host-c serving its own files', async () => {
  const r = await adminCli(['cluster', 'drain', 'host-a'], env(b));
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`host-a is draining since .*its ${N} servers move to the other hosts`));
  await until('host-a drains', () => a.logs.some((l) => l.msg === 'draining this host: it takes no creates, its servers move to the others'), 30_000, 50);
  // a create through the draining host's API is made elsewhere
  const made = await api(a, 'POST', '/create');
  assert.is(made.status, 200, made.text);
  assert.ok(['host-b', 'host-c'].includes(await placed(made.json.id)), 'the draining host made no server');
  assert.is(a.daemon.store.servers.get(made.json.id), undefined);
  // the progress as `cluster status` shows it, read until nothing is left
  const seen: { moved: number; left: number; failed: number }[] = [];
  await until(
    'nothing left on host-a',
    async () => {
      const h = await status();
      assert.ok(h.drain, 'host-a is draining');
      const p = { moved: h.drain.moved, left: h.servers, failed: Object.keys(h.drain.failed).length };
      seen.push(p);
      return p.left === 0 && p.moved === N && !a.daemon.store.servers.all({ withPending: true }).length;
    },
    300_000,
    100,
  ).catch((e: Error) => {
    // where the drain stood: its last progress, and host-a's log of its moves (started, moved, failed)
    const last = seen.slice(-3).map((p) => `${p.moved}/${p.left}/${p.failed}`);
    const moves = a.logs
      .filter((l) => /mov|drain/.test(String(l.msg)))
      .slice(-12)
      .map((l) => `${String(l.time).slice(11, 23)} ${l.msg} ${l.server ?? ''} ${l.err ? JSON.stringify(l.err).slice(0, 160) : ''}`);
    throw new Error(`${e.message}: last progress (moved/left/failed) ${last.join(' ')}; host-a's last move logs:\n    ${moves.join('\n    ')}`);
  });
  console.log(`  progress seen: ${seen.map((p) => `${p.moved}/${p.left}/${p.failed}`).join(' ')}`);
  for (const [i, p] of seen.entries()) {
    assert.is(p.failed, 0, `no move failed: ${JSON.stringify(p)}`);
    // a server whose placement changed is counted moved once its move returned: at most
    // cluster.drainConcurrency (2) are between the two
    assert.ok(p.moved + p.left >= N - 2 && p.moved + p.left <= N, `every server counted (moved + left), ${JSON.stringify(p)}`);
    if (i) assert.ok(p.moved >= seen[i - 1].moved, 'moved never goes back');
  }
  assert.ok(
    seen.some((p) => p.moved > 0 && p.left > 0),
    'the drain seen part done',
  );
  const text = await adminCli(['cluster', 'status'], env(b));
  assert.match(text.stdout, /host-a +up, draining/);
  assert.match(text.stdout, new RegExp(`drain of host-a since .*: ${N} moved, 0 left, 0 failed \\(done`));
  const where = new Map<string, number>();
  for (const s of servers) {
    const h = await placed(s.id);
    assert.ok(h === 'host-b' || h === 'host-c', `${s.id} placed on ${h}`);
    where.set(h, (where.get(h) ?? 0) + 1);
    const on = h === 'host-b' ? b : c;
    assert.ok(on.daemon.store.servers.get(s.id), `${s.id} on ${h}`);
    assert.is(a.daemon.runtime.get(s.id), undefined, `${s.id} gone from host-a`);
    for (const d of [a, b, c]) {
      const page = await get(d, `${s.slug}.localhost`, '/');
      assert.is(page.status, 200, `${s.slug} through ${d.cfg.cluster.host}: ${page.status}`);
      if (page.body.toString() !== s.page) assert.unreachable(explain(s, d, h, page.body.toString()));
    }
    const data = await get(b, `${s.slug}.localhost`, '/data.bin', { tls: true });
    assert.is(data.status, 200);
    assert.is(sha(data.body), s.sha, `${s.slug}: its own file`);
    assert.is(on.daemon.runtime.get(s.id)?.state, 'sleeping', 'served without a wake');
  }
  assert.is(where.size, 2, `spread over both hosts: ${JSON.stringify([...where])}`);
});

test('undrain reopens host-a: a create through it is made there', async () => {
  const r = await adminCli(['cluster', 'undrain', 'host-a'], env(b));
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /host-a takes creates again/);
  await until('host-a takes creates again', () => a.logs.some((l) => l.msg === 'drain ended: this host takes creates again'), 30_000, 50);
  const made = await api(a, 'POST', '/create');
  assert.is(made.status, 200, made.text);
  assert.is(await placed(made.json.id), 'host-a');
  assert.ok(a.daemon.store.servers.get(made.json.id));
  assert.is((await status()).drain, null);
});

test.run();
