// A host partitioned from the registry, with nftables (issue 38 item 3): three hosts on a real
// PostgreSQL registry with their checkpoints in a real S3 store (Ceph RGW), cluster.recoverAfter
// 10 s (the fence's freeze comes 2.5 s before its stop: seen on a loaded machine). host-a and
// host-b run in this process; host-c is the real daemon as a child process in a cgroup v2 of its
// own, so an nft table of the test's own (test/helpers/partition.ts) drops the packets of host-c's
// sockets alone — everything shares the loopback. On host-c a running server whose app (run.sh)
// answers, checkpointed while it runs, then a file written after the checkpoint.
//   - host-c cut off from the registry only (its peers still reach it over the channel, both
//     ways): past its lease and recoverAfter it keeps its server running (never frozen), the
//     others still forward to it and count it alive, and nothing is recovered.
//   - host-c cut off from the registry AND from its peers: it freezes its running server (its app
//     no longer answers on host-c's own edge, not even a request that waited through the freeze),
//     then stops it (host_fenced there) — before host-a or host-b counts it dead and before its
//     lease has been lapsed for recoverAfter, the earliest either may recover it —; then it is
//     recovered on host-a or host-b from its checkpoint and answers through the cluster. After the
//     partition heals — first towards its peers alone (host-c's fence ends, but it has not read
//     where the server runs: it refuses to start its copy, host_fenced), then towards the
//     registry —, host-c does not start it again and keeps its copy aside (it holds a write
//     newer than the checkpoint): the recovered copy is the only one running, and host-c's edge
//     forwards to it.
// statementTimeout is left at its default (5 s): a heartbeat on a cut connection hangs that long,
// which must not delay the self-fence (registry/contact.ts).

import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestDaemon } from '../helpers/daemon.js';
import { Partition } from '../helpers/partition.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import { sleep, until } from '../helpers/wait.js';
import type { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { get, type Got } from '../registry/fixtures/clients.js';
import { startS3Cluster, type S3Cluster } from '../registry/fixtures/s3cluster.js';
import { api } from '../registry/fixtures/twohosts.js';

const RECOVER_MS = 10_000;
const LEASE_MS = 3000;

const APP_PY = `import socket, threading
def handle(c):
    try:
        buf = b""
        while b"\\r\\n\\r\\n" not in buf:
            d = c.recv(65536)
            if not d: return
            buf += d
        body = b"app " + buf.split(b" ", 2)[1]
        c.sendall(b"HTTP/1.1 200 OK\\r\\nConnection: close\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80))
s.listen(256)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`;
const RUN_SH = `#!/bin/bash\nexec python3 /root/app.py\n`;

let cl: S3Cluster;
let pg: TestPostgres;
let part: Partition;
let a: TestDaemon;
let b: TestDaemon;
let c: ProcDaemon;
let cPort = 0;
let srv: { id: string; slug: string; host: string; key: string; sha: string };

const edgeOfC = () => ({ http: c.http, https: c.https, ca: '' });
const isApp = (g: Got | undefined, path: string) => g?.status === 200 && g.body.toString() === `app ${path}`;
const placement = async () => (await pg.sql(`SELECT host FROM placements WHERE server_id = '${srv.id}'`)).trim();
const exec = async (via: { http: number }, command: string) => {
  const r = await api(via, 'POST', `/servers/${srv.id}/exec`, { key: srv.key, body: { command, timeout: 120 } });
  assert.is(r.status, 200, `${command}: ${r.text}`);
  assert.is(r.json.exit_code, 0, `${command}: ${r.json.stderr}`);
  return String(r.json.stdout);
};
/** One request with a deadline: undefined when nothing answered in time. */
const within = (p: Promise<Got>, ms: number) => Promise.race([p.catch(() => undefined), sleep(ms).then(() => undefined)]) as Promise<Got | undefined>;

/** The state of host-c's container of the server (runc's word), or undefined when it has none. */
async function containerOnC(): Promise<string | undefined> {
  const r = await run('runc', ['--root', join(c.dataDir, 'runc'), 'state', srv.id]);
  return r.code === 0 ? (JSON.parse(r.stdout) as { status: string }).status : undefined;
}
/** The server's cgroup on host-c now (cgroup v1 freezer or v2): frozen (the fence's freeze),
 *  running, or gone (the container halted: its cgroup is removed). One file read. */
function cgroupOnC(): 'frozen' | 'running' | 'gone' {
  const v1 = `/sys/fs/cgroup/freezer/${c.table}/${srv.id}/freezer.state`;
  const v2 = `/sys/fs/cgroup/${c.table}/${srv.id}/cgroup.events`;
  try {
    if (existsSync('/sys/fs/cgroup/cgroup.controllers')) return /^frozen 1$/m.test(readFileSync(v2, 'utf8')) ? 'frozen' : 'running';
    return readFileSync(v1, 'utf8').trim() === 'FROZEN' ? 'frozen' : 'running';
  } catch {
    return 'gone';
  }
}
const frozenOnC = () => cgroupOnC() === 'frozen';
/** host-c's lease as the registry keeps it: when it runs out (ms since the epoch). */
const leaseOfC = async () => Number((await pg.sql(`SELECT (extract(epoch FROM lease_until) * 1000)::bigint FROM hosts WHERE name = 'host-c'`)).trim());
const registryNow = async () => Number((await pg.sql(`SELECT (extract(epoch FROM now()) * 1000)::bigint`)).trim());

test.before(async () => {
  try {
    await setUp();
  } catch (e) {
    for (const l of c?.logs ?? []) if (l.level === 'warn' || l.level === 'error') console.error('host-c:', JSON.stringify(l).slice(0, 600));
    throw e;
  }
});

async function setUp(): Promise<void> {
  part = await Partition.create();
  const host = (name: string, child?: { cgroupProcs: string }) => ({
    name,
    child,
    settings: {
      // statementTimeout stays the default (5 s): a heartbeat on a cut connection hangs that long
      cluster: { lease: `${LEASE_MS}ms`, recoverAfter: `${RECOVER_MS}ms`, forwardConnectTimeout: '1s' },
      checkpoints: { interval: 0 }, // only the checkpoint the test takes
      proxy: { idleTimeout: 600_000, wakeTimeout: '30s' },
    },
  });
  cl = await startS3Cluster([host('host-a'), host('host-b'), host('host-c', { cgroupProcs: part.procs })]);
  ({ pg } = cl);
  a = cl.daemon('host-a');
  b = cl.daemon('host-b');
  c = cl.child('host-c');
  cPort = cl.port('host-c');
  const slug = `pt${randomBytes(3).toString('hex')}`;
  const r = await api(c, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  srv = { id: r.json.id, slug, host: `${slug}.localhost`, key: r.json.api_key, sha: '' };
  assert.is(await placement(), 'host-c');
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  await exec(
    c,
    `echo ${b64(APP_PY)} | base64 -d > /root/app.py && echo ${b64(RUN_SH)} | base64 -d > /root/run.sh && chmod +x /root/run.sh && head -c 4000000 /dev/urandom > /root/data && sync`,
  );
  srv.sha = (await exec(c, 'sha256sum /root/data | cut -d" " -f1')).trim();
  for (const via of [edgeOfC(), a, b])
    await until(`the app answers through ${via.http}`, async () => isApp(await get(via, srv.host, '/up').catch(() => undefined), '/up'), 30_000, 100);
  // checkpointed while it runs; then a write no checkpoint holds (host-c's copy is newer than the store's)
  const cp = await api(c, 'POST', `/servers/${srv.id}/checkpoints`, { key: srv.key, body: { comment: 'before the partition' } });
  assert.is(cp.status, 201, cp.text);
  await exec(c, 'echo later > /root/later && sync');
  assert.is(await containerOnC(), 'running');
}

test.after(async () => {
  // every step runs whatever an earlier one threw; the first error is the one reported
  const errors: unknown[] = [];
  for (const step of [() => part?.heal(), () => cl?.stop(), () => part?.remove()])
    await Promise.resolve()
      .then(step)
      .catch((e) => errors.push(e));
  if (errors.length) throw errors[0];
});

test('host-c cut off from the registry only (its peers reach it): it keeps its server running and is forwarded to; nothing is recovered', async () => {
  await part.cut({ remote: [pg.port] });
  const t0 = Date.now();
  try {
    await until("host-c's lease lapsed in the registry", async () => (await leaseOfC()) < (await registryNow()), 3 * LEASE_MS);
    await until("host-a sees host-c's lease lapsed", () => a.daemon.registry!.placements.host('host-c')?.lease === false, 3 * LEASE_MS);
    // well past its lease and recoverAfter: sampled all along
    let n = 0;
    while (Date.now() - t0 < LEASE_MS + RECOVER_MS + 3000) {
      assert.is(await containerOnC(), 'running', 'still running on host-c');
      assert.not.ok(frozenOnC(), 'never frozen');
      const via = n % 2 ? a : b;
      const path = `/registry-only-${n++}`;
      const g = await get(via, srv.host, path);
      assert.ok(isApp(g, path), `${path} through ${via.cfg.cluster.host}: ${g.status} ${g.body.subarray(0, 200).toString()}`);
      for (const d of [a, b]) assert.is(d.daemon.registry!.contact.verdict('host-c').dead, false, `${d.cfg.cluster.host} does not count host-c dead`);
      await sleep(300);
    }
    assert.ok(n >= 10, `${n} requests forwarded to host-c`);
    assert.ok((await part.dropped()) > 0, "the nft rule dropped host-c's packets to the registry");
    assert.is(await placement(), 'host-c');
    assert.is((await pg.sql(`SELECT count(*) FROM recoveries WHERE server_id = '${srv.id}'`)).trim(), '0', 'no recovery');
    assert.not.ok(
      c.current().some((l) => /self-fence/.test(String(l.msg))),
      'host-c never fenced itself',
    );
    assert.ok(
      c.current().some((l) => l.msg === 'registry unreachable; serving what this host has'),
      'host-c found the registry unreachable',
    );
  } finally {
    await part.heal();
  }
  await until("host-c's lease runs again", async () => (await leaseOfC()) > (await registryNow()), 30_000, 200);
  await until('host-a counts host-c up', () => a.daemon.registry!.placements.host('host-c')?.lease === true, 30_000);
  assert.ok(isApp(await get(edgeOfC(), srv.host, '/after-heal'), '/after-heal'));
});

test('host-c cut off from the registry and its peers: it freezes, then stops its server before it may be recovered; recovered elsewhere; after the heal the recovered copy alone runs', async () => {
  const seen = c.current().length;
  await part.cut({ remote: [pg.port, Number(a.cfg.cluster.listen.split(':')[1]), Number(b.cfg.cluster.listen.split(':')[1])], local: [cPort] });
  const t0 = Date.now();
  let tFrozen: number | undefined;
  let tStopped: number | undefined;
  let tRecovered: number | undefined;
  /** When host-a or host-b first counted host-c dead (from then on either may recover its servers). */
  let tDead: number | undefined;
  let duringFreeze: Promise<Got | undefined> | undefined;
  let holder = '';
  // sampled every 10 ms (a file read, the in-process verdicts): the freeze, the stop, the others' verdict
  const sampler = setInterval(() => {
    const now = Date.now();
    const cg = cgroupOnC();
    if (tFrozen === undefined && cg === 'frozen') {
      tFrozen = now;
      // a request on host-c's own edge while the server is frozen: the app does not answer it
      duringFreeze = within(get(edgeOfC(), srv.host, '/while-frozen'), 20_000);
    }
    if (tStopped === undefined && cg === 'gone') tStopped = now;
    if (tDead === undefined && [a, b].some((d) => d.daemon.registry!.contact.verdict('host-c').dead)) tDead = now;
  }, 10);
  try {
    // the recovery: the placement moving off host-c
    while (Date.now() - t0 < 60_000) {
      holder = await placement();
      if (holder !== 'host-c') {
        tRecovered = Date.now();
        break;
      }
      await sleep(100);
    }
    clearInterval(sampler);
    for (const l of c.current().slice(seen))
      if (/self-fence|registry unreachable/.test(String(l.msg))) console.log(`  host-c ${Date.parse(l.time) - t0} ms: ${l.msg}`);
    const lapsedAt = await leaseOfC();
    const at = (t?: number) => (t === undefined ? 'never' : `${t - t0} ms`);
    console.log(
      `  after the cut: frozen ${at(tFrozen)}, stopped ${at(tStopped)}, lease ran out ${at(lapsedAt)}, counted dead ${at(tDead)}, recovered on ${holder} ${at(tRecovered)} (recoverAfter ${RECOVER_MS} ms)`,
    );
    assert.ok(tFrozen !== undefined, 'host-c froze its server');
    assert.ok(tStopped !== undefined && tStopped > tFrozen, 'then stopped it');
    assert.ok(tRecovered !== undefined && tDead !== undefined, 'the server was recovered');
    assert.ok(tStopped < tDead, `stopped before another host counted host-c dead (${tDead - tStopped} ms before)`);
    assert.ok(tDead < tRecovered, 'recovered once counted dead');
    assert.ok(
      tStopped < lapsedAt + RECOVER_MS,
      `stopped ${tStopped - lapsedAt} ms after its lease ran out: before recoverAfter (${RECOVER_MS} ms), the earliest a recovery may start`,
    );
    assert.ok(tRecovered >= lapsedAt + RECOVER_MS, 'not recovered before recoverAfter');
    assert.ok(['host-a', 'host-b'].includes(holder), holder);
    const said = c.current().slice(seen);
    assert.ok(said.some((l) => /running servers frozen \(self-fence\)/.test(String(l.msg))));
    assert.ok(said.some((l) => l.msg === 'self-fence: server stopped' && l.server === srv.id));
    // frozen, its app gave host-c's edge no answer; stopped, host-c refuses to start it
    const g = await duringFreeze!;
    console.log(`  the request made while frozen: ${g ? `${g.status} ${g.body.toString().slice(0, 120)}` : 'no answer'}`);
    assert.not.ok(isApp(g, '/while-frozen'), `no answer of the app while frozen: ${g?.status} ${g?.body.toString().slice(0, 200)}`);
    const fenced = await get(edgeOfC(), srv.host, '/while-fenced');
    assert.is(fenced.status, 503, `${fenced.status} ${fenced.body.toString().slice(0, 200)}`);
    assert.is(JSON.parse(fenced.body.toString()).error, 'host_fenced');
    assert.is(await containerOnC(), undefined, 'host-c started nothing');
    // recovered: its app answers through the other hosts, its checkpoint's files, not the later write
    const owner = holder === 'host-a' ? a : b;
    for (const via of [a, b])
      await until(`the app through ${via.cfg.cluster.host}`, async () => isApp(await get(via, srv.host, '/recovered'), '/recovered'), 30_000, 200);
    assert.is(owner.daemon.runtime.get(srv.id)?.state, 'running');
    assert.is((await exec(a, 'sha256sum /root/data | cut -d" " -f1')).trim(), srv.sha);
    assert.is((await exec(b, 'test -e /root/later && echo kept || echo lost')).trim(), 'lost');
    assert.is((await pg.sql(`SELECT outcome FROM recoveries WHERE server_id = '${srv.id}'`)).trim(), 'recovered');
    // the heal in two steps: host-c's peers answer it first, the registry still cut. Its fence ends
    // (no longer cut off), but it has not read where the server runs: it must not start its copy
    await part.cut({ remote: [pg.port] });
    const cutOffDetail = /cannot reach the rest of the cluster/;
    const early = await until(
      'host-c reaches its peers again (a start is no longer refused for the cut-off)',
      async () => {
        const g = await get(edgeOfC(), srv.host, '/peers-only');
        return g.status === 503 && cutOffDetail.test(g.body.toString()) ? undefined : g;
      },
      30_000,
      200,
    );
    console.log(`  peers back, registry still cut: ${early.status} ${early.body.toString().slice(0, 160)}`);
    assert.is(early.status, 503, `${early.status} ${early.body.toString().slice(0, 200)}`);
    assert.is(JSON.parse(early.body.toString()).error, 'host_fenced');
    assert.is(await containerOnC(), undefined, 'host-c started no copy on its peers alone');
  } finally {
    clearInterval(sampler);
    await part.heal();
  }
  // healed: host-c does not run it again; its copy (with the later write) is kept aside, not run
  const tHeal = Date.now();
  const dropped = await until(
    'host-c drops its stale copy',
    () => c.current().find((l) => l.msg === 'stale copies of servers placed on another host removed'),
    30_000,
    100,
  );
  console.log(
    `  healed: host-c dropped its copy ${Date.now() - tHeal} ms after: ${JSON.stringify({ removed: dropped.removed, keptAside: dropped.keptAside })}`,
  );
  assert.equal(dropped.removed, [srv.id]);
  assert.equal(dropped.keptAside, [srv.id], 'kept aside: it holds a write newer than the checkpoint');
  assert.not.ok(existsSync(join(c.dataDir, 'servers', srv.id)), 'host-c no longer has it among its servers');
  const kept = readdirSync(join(c.dataDir, 'lost+found')).filter((f) => f.startsWith(srv.id) && f.endsWith('.json'));
  assert.is(kept.length, 1, 'its disk is in lost+found');
  assert.is(JSON.parse(readFileSync(join(c.dataDir, 'lost+found', kept[0]), 'utf8')).placedOn, holder);
  // host-c's channel to the owner opens again (until then it answers 503 host_unavailable, Retry-After)
  await until("host-c's edge forwards to the recovered copy", async () => isApp(await get(edgeOfC(), srv.host, '/reopened'), '/reopened'), 15_000, 200);
  // for a while: the recovered copy is the only one running, and host-c's edge forwards to it
  const owner = holder === 'host-a' ? a : b;
  const until2 = Date.now() + 5000;
  let n = 0;
  while (Date.now() < until2) {
    for (const via of [edgeOfC(), a, b]) {
      const path = `/healed-${n++}`;
      const g = await get(via, srv.host, path);
      assert.ok(isApp(g, path), `${path} through ${via.http}: ${g.status} ${g.body.toString().slice(0, 200)}`);
    }
    assert.is(await containerOnC(), undefined, 'host-c runs no copy');
    assert.is(owner.daemon.runtime.get(srv.id)?.state, 'running');
    assert.is((owner === a ? b : a).daemon.runtime.get(srv.id), undefined);
    assert.is(await placement(), holder);
    await sleep(250);
  }
  assert.is((await exec(edgeOfC(), 'sha256sum /root/data | cut -d" " -f1')).trim(), srv.sha, "its files through host-c's API: the recovered copy's");
});

test.run();
