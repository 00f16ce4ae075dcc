// bench/move/run.ts: servers moving between hosts (issue 38), three real daemons on one machine —
// each `rootbox serve` in a process of its own (test/hosting/helpers/procdaemon.ts: own data dir,
// bridge, subnet, uid ranges, port pool), a real PostgreSQL registry (test/helpers/postgres.ts)
// and their checkpoints in the real S3 server the tests use (Ceph RGW, test/helpers/s3.ts); the
// cluster's lease (15 s) and connect timeout (3 s) at their defaults.
// Every figure is printed beside its goal (×goal), in the same run:
//   a. drain of host-a holding --servers (20) sleeping servers (anonymous: 256 MiB disks), each
//      holding 100 MiB of random bytes (so compression does not cheat) and its own page in
//      /root/www: the time from `rootbox cluster drain host-a` until no server is placed on it
//      (goal ≤ 60 s), and each server's unavailability as its client sees it, which requests its
//      page every 100 ms (one request at a time, from an address of its own) through the three
//      edges in turn (p50 and max over the servers, goal ≤ 3 s each; see `unavailable` below);
//      per edge the slowest requests and the answers that were not the page; with the moves'
//      own timings from host-a's log;
//   b. move of a running server (100 MiB of random bytes, an app under run.sh and a writer that
//      appends the time to /root/clock every 100 ms) between host-b and host-c, --moves (5) times
//      by `rootbox servers move`: its unavailability per move (p50 and max, goal ≤ 3 s);
//   c. host-c killed with SIGKILL (its containers too: the machine died) while it holds the
//      running server and the sleeping servers the drain put there: the time from the moment
//      cluster.recoverAfter has elapsed (host-c's lease end + recoverAfter) until every sleeping
//      server serves its page again through host-a's and host-b's edges (goal ≤ 30 s); and for the
//      running server the writes lost (the kill's time less the newest line of /root/clock once
//      it is recovered; goal ≤ checkpoints.interval), beside the age of its newest checkpoint at
//      the kill.
// A server is "unavailable" for a request sent at t for as long as the client waits from t until
// it holds the right page (that request's own answer, or a later one's: the client goes on asking
// every 100 ms); a wrong page is counted apart (goal: none).
// The machine is shared: expect noise; the load average at the start and end is printed.
// Run as root, from the checkout, with the images built (ROOTBOX_IMAGE_DIR) and Debian's ceph-mon,
// ceph-osd, radosgw and postgresql installed (as the container tests need):
//   node --import tsx bench/move/run.ts [--servers 20] [--moves 5] [--recover-after 20s] [--interval 30s] [--concurrency 2] [--only running]
// (`--only running`: part b alone.)
// Everything it starts (daemons, servers, networks, PostgreSQL, Ceph) is removed at the end; the
// daemons' logs are kept in a temp dir it prints.
// One run on main at 0fe0b4a + this wait, a quiet machine (load 0.8 at the start, 3.3 at the end),
// defaults as above: a. drain 50.3 s (goal 60 s); each server unavailable p50 0.80 s, max 0.97 s;
// a move p50 4.18 s (stop 0.20, checkpoint 0.00 — its newest one holds its disk —, target 3.98);
// b. running server unavailable p50 1.77 s, max 1.96 s (stop 0.22, final checkpoint 0.97, target
// 0.61; staged before the stop 1.60 s, 5–7 of ~120 chunks fetched after it); c. every sleeping
// server serving 19.1 s (p50) / 26.1 s (max) after recoverAfter; lost writes 1.3 s, its newest
// checkpoint 0.9 s old at the kill.

import { request, Agent } from 'node:http';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { adminCli } from '../../test/helpers/admincli.js';
import { freePort } from '../../test/helpers/ports.js';
import type { TestPostgres } from '../../test/helpers/postgres.js';
import { run } from '../../test/helpers/run.js';
import { startS3, type TestS3 } from '../../test/helpers/s3.js';
import { until } from '../../test/helpers/wait.js';
import { ProcDaemon } from '../../test/hosting/helpers/procdaemon.js';
import { api, clusterOpts, startClusterRegistry } from '../../test/registry/fixtures/twohosts.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const SERVERS = Number(arg('servers', '20'));
const MOVES = Number(arg('moves', '5'));
const RECOVER_AFTER = arg('recover-after', '20s');
const INTERVAL = arg('interval', '30s');
const CONCURRENCY = Number(arg('concurrency', '2'));
/** `--only running`: part b alone (no drain, no kill). */
const RUNNING_ONLY = arg('only', 'all') === 'running';
const secs = (d: string) => Number(/^(\d+)s$/.exec(d)?.[1] ?? NaN) * 1000;
const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.max(0, Math.ceil((p / 100) * xs.length) - 1))];
const s = (ms: number) => `${(ms / 1000).toFixed(2).padStart(7)} s`;
const row = (label: string, value: string) => console.log(`  ${label.padEnd(70)}${value}`);
/** "p50 … max …" of durations. */
const spread = (xs: number[]) => `p50 ${s(pct(xs, 50))}   max ${s(Math.max(...xs))}`;
const goal = (v: number, g: number) => `×${(v / g).toFixed(2)} goal${v > g ? '  MISSED' : ''}`;
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

interface Srv {
  id: string;
  slug: string;
  key: string;
  page: string;
}
type Edge = { name: string; http: number };
interface Ask {
  edge: string;
  status: number;
  sent: number;
  done: number;
  ok: boolean;
  wrong: boolean;
}

const agent = new Agent({ keepAlive: true });
let clients = 0;
/** One GET of a server's page through an edge from address `from`: ok when it is the server's own page. */
function ask(edge: Edge, srv: Srv, from?: string): Promise<Ask> {
  const sent = performance.now();
  return new Promise((resolve) => {
    let status = 0;
    const done = (ok: boolean, wrong: boolean) => resolve({ edge: edge.name, status, sent, done: performance.now(), ok, wrong });
    const req = request(
      { host: '127.0.0.1', port: edge.http, path: '/', headers: { host: `${srv.slug}.localhost` }, agent, localAddress: from, timeout: 30_000 },
      (res) => {
        const chunks: Buffer[] = [];
        status = res.statusCode ?? 0;
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString();
          // a 200 with another page is wrong content; an error status is only unavailability
          done(res.statusCode === 200 && body === srv.page, res.statusCode === 200 && body !== srv.page);
        });
        res.on('error', () => done(false, false));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => done(false, false));
    req.end();
  });
}

/** A client per server, each from an address of its own (as many visitors would be, never one
 *  address over the edge's per-address limits): it asks for the page every 100 ms, through `edges`
 *  in turn, one request at a time (a request that waits delays the next), each answer kept. */
function probe(servers: Srv[], edges: () => Edge[]) {
  const asks = new Map<string, Ask[]>(servers.map((x) => [x.id, []]));
  let stopped = false;
  const loops = servers.map(async (srv) => {
    const from = `127.0.${20 + Math.floor(clients / 250)}.${1 + (clients++ % 250)}`;
    for (let n = 0; !stopped; n++) {
      const e = edges();
      const a = await ask(e[n % e.length], srv, from);
      asks.get(srv.id)!.push(a);
      await sleep(Math.max(0, 100 - (a.done - a.sent)));
    }
  });
  return {
    asks,
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

/** The longest a client asking from `from` to `to` waited for the right page (see the header). */
function unavailable(asks: Ask[], from: number, to: number): number {
  const sorted = [...asks].sort((a, b) => a.sent - b.sent);
  let worst = 0;
  let nextOk = Infinity; // the earliest right answer among requests sent at or after this one
  for (let i = sorted.length - 1; i >= 0; i--) {
    const a = sorted[i];
    if (a.ok) nextOk = Math.min(nextOk, a.done);
    if (a.sent >= from && a.sent <= to) worst = Math.max(worst, nextOk - a.sent);
  }
  return worst;
}

const wrongs = (asks: Ask[], from: number, to: number) => asks.filter((a) => a.wrong && a.sent >= from && a.sent <= to).length;

let s3: TestS3 | undefined;
let pg: TestPostgres | undefined;
const hosts: Record<string, ProcDaemon> = {};

async function main(): Promise<void> {
  console.log(
    `bench/move: ${SERVERS} sleeping servers drained, ${MOVES} moves of a running one, a host killed; cluster.drainConcurrency ${CONCURRENCY}, recoverAfter ${RECOVER_AFTER}, checkpoints.interval ${INTERVAL}; load ${load()}`,
  );
  s3 = await startS3();
  const bucket = await s3.bucket();
  Object.assign(process.env, s3.env);
  pg = await startClusterRegistry();
  const db = pg;
  const checkpoints = {
    store: `s3://${bucket}/cluster`,
    interval: INTERVAL,
    s3: { endpoint: s3.endpoint, connectTimeout: '2s', timeout: '60s', maxAttempts: 3 },
  };
  const make = async (name: string, proxy: Record<string, unknown>) => {
    const o = clusterOpts(db, name, await freePort());
    const d = new ProcDaemon({
      config: {
        ...o,
        log: { level: 'info' },
        // the production lease and connect timeout, not the tests' short ones (3 s, 500 ms): a
        // channel ping unanswered for 500 ms on a loaded machine drops the session and the moves on it
        cluster: {
          registry: o.cluster.registry,
          host: o.cluster.host,
          listen: o.cluster.listen,
          advertise: o.cluster.advertise,
          recoverAfter: RECOVER_AFTER,
          drainConcurrency: CONCURRENCY,
        },
        hosting: { anonServersPerIp: SERVERS + 10, rateLimit: { perIpPerMinute: 100_000, perKeyPerMinute: 100_000, createsPerIpPerHour: 1000 } },
        checkpoints,
        proxy: { wakeTimeout: '30s', ...proxy },
      },
    });
    hosts[name] = d;
    await d.start();
    return d;
  };
  // host-a's servers fall asleep (checkpointed at sleep) soon after their files are written;
  // the others' stay up while nobody asks (the running server keeps running until host-c dies)
  const a = await make('host-a', { idleTimeout: '3s', idleCheckInterval: '500ms' });
  const [b, c] = await Promise.all([make('host-b', { idleTimeout: '1h' }), make('host-c', { idleTimeout: '1h' })]);
  const edge = (d: ProcDaemon, name: string): Edge => ({ name, http: d.http });
  const env = (d: ProcDaemon) => ({ ...process.env, ROOTBOX_DATA_DIR: d.dataDir, ROOTBOX_REGISTRY: db.url });
  const placed = async (id: string) => (await db.sql(`SELECT host FROM placements WHERE server_id = '${id}'`)).trim();
  const countOn = async (host: string, ids: string[]) =>
    Number((await db.sql(`SELECT count(*) FROM placements WHERE host = '${host}' AND server_id IN (${ids.map((x) => `'${x}'`).join(',')})`)).trim());
  const exec = async (via: ProcDaemon, srv: Srv, command: string) => {
    const r = await api(via, 'POST', `/servers/${srv.id}/exec`, { key: srv.key, body: { command, timeout: 300 } });
    if (r.status !== 200 || r.json.exit_code !== 0) throw new Error(`${command.slice(0, 80)}: ${r.status} ${r.text.slice(0, 400)}`);
    return String(r.json.stdout);
  };
  const cli = async (d: ProcDaemon, args: string[]) => {
    const r = await adminCli(args, env(d));
    if (r.code !== 0) throw new Error(`rootbox ${args.join(' ')}: ${r.stderr || r.stdout}`);
    return r.stdout;
  };

  // ── a. drain of SERVERS sleeping servers ─────────────────────────────────────────────────────
  const sleepers: Srv[] = [];
  if (!RUNNING_ONLY) {
    const t0 = performance.now();
    for (let i = 0; i < SERVERS; i++) {
      const slug = `mv${i}${randomBytes(3).toString('hex')}`;
      const r = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
      if (r.status !== 200) throw new Error(`create: ${r.text}`);
      sleepers.push({ id: r.json.id, slug, key: r.json.api_key, page: `page of ${slug} ${randomBytes(8).toString('hex')}\n` });
    }
    /** When each server's files were written: a server created early fell asleep before (its
     *  checkpoint at that sleep holds an empty disk); the one at its next sleep holds them. */
    const wrote = new Map<string, number>();
    for (let i = 0; i < sleepers.length; i += 4)
      await Promise.all(
        sleepers
          .slice(i, i + 4)
          .map((x) =>
            exec(a, x, `mkdir -p /root/www && echo -n '${x.page}' > /root/www/index.html && head -c ${100 * MiB} /dev/urandom > /root/data && sync`).then(() =>
              wrote.set(x.id, Date.now()),
            ),
          ),
      );
    await until(
      'every server of host-a asleep, its files in a checkpoint',
      async () => {
        for (const x of sleepers) {
          const g = await api(a, 'GET', `/servers/${x.id}`, { key: x.key });
          if (g.json?.state !== 'sleeping') return false;
          const cps = await api(a, 'GET', `/servers/${x.id}/checkpoints`, { key: x.key });
          const made = ((cps.json?.checkpoints as { created_at: string }[] | undefined) ?? []).map((c) => Date.parse(c.created_at));
          if (!made.some((t) => t > wrote.get(x.id)!)) return false;
        }
        return true;
      },
      600_000,
      1000,
    );
    for (const x of sleepers) if ((await placed(x.id)) !== 'host-a') throw new Error(`${x.slug} was made on ${await placed(x.id)}, not host-a`);
    console.log(`\na. drain of host-a: ${SERVERS} sleeping servers, 100 MiB of random bytes each (set up in ${s(performance.now() - t0).trim()})`);
    const all = [edge(a, 'a'), edge(b, 'b'), edge(c, 'c')];
    const pa = probe(sleepers, () => all);
    await sleep(2000);
    const d0 = performance.now();
    await cli(b, ['cluster', 'drain', 'host-a']);
    const ids = sleepers.map((x) => x.id);
    await until('no server left on host-a', async () => (await countOn('host-a', ids)) === 0, 600_000, 200);
    const d1 = performance.now();
    await sleep(3000);
    await pa.stop();
    const per = sleepers.map((x) => unavailable(pa.asks.get(x.id)!, d0, d1));
    // where the wait is: per edge, each server's slowest request and the answers that were not its page
    const byEdge = (e: string) => {
      const mine = sleepers.map((x) => pa.asks.get(x.id)!.filter((q) => q.edge === e && q.sent >= d0 && q.sent <= d1));
      const statuses = new Map<number, number>();
      for (const q of mine.flat()) if (!q.ok) statuses.set(q.status, (statuses.get(q.status) ?? 0) + 1);
      return { slowest: mine.map((qs) => Math.max(0, ...qs.map((q) => q.done - q.sent))), statuses };
    };
    const wrong = sleepers.reduce((n, x) => n + wrongs(pa.asks.get(x.id)!, d0, d1 + 3000), 0);
    const split = new Map<string, number>();
    for (const x of sleepers) split.set(await placed(x.id), (split.get(await placed(x.id)) ?? 0) + 1);
    row('drain: `cluster drain host-a` → no server placed on it, goal ≤ 60 s', `${s(d1 - d0)}   ${goal(d1 - d0, 60_000)}`);
    row(
      `each server unavailable (n=${SERVERS}, a request every 100 ms), goal ≤ 3 s`,
      `p50 ${s(pct(per, 50))}   max ${s(Math.max(...per))}   ${goal(Math.max(...per), 3000)}`,
    );
    row('wrong pages during the drain, goal 0', `${wrong}`);
    for (const e of all) {
      const r = byEdge(e.name);
      row(
        `  through host-${e.name}'s edge: each server's slowest request; not its page (status: count)`,
        `${spread(r.slowest)}   ${[...r.statuses].map(([k, v]) => `${k || 'none'}: ${v}`).join(', ') || '-'}`,
      );
    }
    row('where they went', [...split].map(([h, n]) => `${h} ${n}`).join(', '));
    const moved = a.logs.filter((l) => l.msg === 'server moved' && l.heldMs !== undefined);
    if (moved.length) {
      const ph = (k: string) => moved.map((l) => Number(l.phases?.[k] ?? 0));
      row(`  host-a's log: requests held per move (n=${moved.length})`, spread(moved.map((l) => Number(l.heldMs))));
      row(`  host-a's log: each move, its stop to the target's answer`, spread(ph('stop').map((x, i) => x + ph('checkpoint')[i] + ph('target')[i])));
      for (const k of ['stop', 'checkpoint', 'target']) row(`    of which ${k}`, spread(ph(k)));
    }
    const st = JSON.parse(await cli(b, ['cluster', 'status', '--json'])) as {
      hosts: { name: string; servers: number; drain: { moved: number; failed: object } | null }[];
    };
    const ha = st.hosts.find((h) => h.name === 'host-a')!;
    row('cluster status', `${ha.drain?.moved} moved, ${ha.servers} left, ${Object.keys(ha.drain?.failed ?? {}).length} failed`);
    await cli(b, ['cluster', 'undrain', 'host-a']);
  }

  // ── b. moves of a running server ────────────────────────────────────────────────────────────
  console.log(`\nb. move of a running server (100 MiB of random bytes, an app, a writer), ${MOVES} times between host-b and host-c`);
  const slug = `mvrun${randomBytes(3).toString('hex')}`;
  const cr = await api(b, 'POST', '/create', { body: { subdomains: [slug] } });
  if (cr.status !== 200) throw new Error(`create: ${cr.text}`);
  const app: Srv = { id: cr.json.id, slug, key: cr.json.api_key, page: `app of ${slug} ${randomBytes(8).toString('hex')}\n` };
  if ((await placed(app.id)) !== 'host-b') throw new Error(`the running server was made on ${await placed(app.id)}`);
  const runSh = `#!/bin/bash\n(while :; do date +%s%3N >> /root/clock; sleep 0.1; done) &\nexec python3 -m http.server 80 --directory /root/www\n`;
  await exec(
    b,
    app,
    `mkdir -p /root/www && echo -n '${app.page}' > /root/www/index.html && head -c ${100 * MiB} /dev/urandom > /root/data && sync && printf '%s' '${runSh}' > /root/run.sh && chmod +x /root/run.sh`,
  );
  const bc = [edge(b, 'b'), edge(c, 'c'), edge(a, 'a')];
  await until('the app answers', async () => (await ask(bc[0], app)).ok, 60_000, 200);
  const pb = probe([app], () => bc);
  await sleep(2000);
  const runs: { unavailable: number; held: number; took: number; phases: Record<string, number> }[] = [];
  const failures: string[] = [];
  let on = 'host-b';
  for (let i = 0; i < MOVES; i++) {
    const to = on === 'host-b' ? 'host-c' : 'host-b';
    const m0 = performance.now();
    let out: { held_ms: number; took_ms: number; held_phases_ms: Record<string, number> };
    try {
      out = JSON.parse(await cli(hosts[on], ['servers', 'move', app.id, '--to', to, '--json'])).move;
    } catch (e) {
      failures.push((e as Error).message.slice(0, 220));
      await sleep(3000);
      continue;
    }
    const m1 = performance.now();
    await sleep(3000);
    runs.push({ unavailable: unavailable(pb.asks.get(app.id)!, m0, m1), held: out.held_ms, took: out.took_ms, phases: out.held_phases_ms });
    on = to;
  }
  const bEnd = performance.now();
  for (const f of failures) row('  a move failed (the server stays where it was)', f);
  if (!runs.length) throw new Error('no move of the running server succeeded');
  const ua = runs.map((r) => r.unavailable);
  row(`running server unavailable per move (n=${runs.length} of ${MOVES}), goal ≤ 3 s`, `${spread(ua)}   ${goal(Math.max(...ua), 3000)}`);
  row('  the move report: requests held', spread(runs.map((r) => r.held)));
  for (const k of ['stop', 'checkpoint', 'target']) row(`    of which ${k}`, spread(runs.map((r) => r.phases[k])));
  row('  the move report: the whole move (checkpoint while running included)', spread(runs.map((r) => r.took)));
  row('wrong pages during the moves, goal 0', `${wrongs(pb.asks.get(app.id)!, 0, bEnd)}`);
  // the targets' side (moves/prepare.ts, target.ts): the prestage before the stop, the patch after it
  const tlogs = [...b.logs, ...c.logs].filter((l) => l.server === app.id);
  const staged = tlogs.filter((l) => l.msg === 'a running server’s checkpoint staged for its move here');
  const patched = tlogs.filter((l) => l.msg === 'a moved server’s staged image patched');
  if (staged.length) row(`  targets' logs: checkpoint staged before the stop (n=${staged.length})`, spread(staged.map((l) => Number(l.ms))));
  if (patched.length)
    row(
      `  targets' logs: staged image patched after it (n=${patched.length}); chunks fetched of`,
      `${spread(patched.map((l) => Number(l.ms)))}   ${patched.map((l) => `${l.fetched}/${l.chunks}`).join(' ')}`,
    );
  if (RUNNING_ONLY) return;

  // ── c. recovery after host-c's loss ─────────────────────────────────────────────────────────
  const onC: Srv[] = [];
  for (const x of sleepers) if ((await placed(x.id)) === 'host-c') onC.push(x);
  if (on !== 'host-c') await cli(hosts[on], ['servers', 'move', app.id, '--to', 'host-c']).then(() => (on = 'host-c'));
  if (!onC.length) throw new Error(`host-c holds no sleeping server`);
  console.log(`\nc. host-c killed (SIGKILL, its containers too) holding the running server and ${onC.length} sleeping ones; recoverAfter ${RECOVER_AFTER}`);
  // it runs as it would: its interval checkpoints go on while the app is asked every 100 ms
  await sleep(1.5 * secs(INTERVAL));
  const cps = (await api(b, 'GET', `/servers/${app.id}/checkpoints`, { key: app.key })).json.checkpoints as { created_at: string }[];
  const kill = Date.now();
  const killPerf = performance.now();
  await c.kill();
  const runcRoot = join(c.dataDir, 'runc');
  for (const id of (await run('runc', ['--root', runcRoot, 'list', '-q'])).stdout.split('\n').filter(Boolean))
    await run('runc', ['--root', runcRoot, 'kill', '--all', id, 'KILL']);
  await pb.stop();
  const newest = Math.max(...cps.map((x) => Date.parse(x.created_at)));
  const ab = [edge(a, 'a'), edge(b, 'b')];
  const pc = probe(onC, () => ab);
  const leaseEnd = Number((await db.sql(`SELECT (extract(epoch FROM lease_until) * 1000)::bigint FROM hosts WHERE name = 'host-c'`)).trim());
  const due = leaseEnd + secs(RECOVER_AFTER);
  const duePerf = killPerf + (due - kill);
  const movedIds = [...onC.map((x) => x.id), app.id];
  // at most 5 min: a server that is not recovered by then is reported with the registry's why
  const served = (x: Srv) => pc.asks.get(x.id)!.some((q) => q.ok && q.sent >= duePerf);
  await until('every server of host-c recovered', async () => (await countOn('host-c', movedIds)) === 0 && onC.every(served), 300_000, 200).catch(
    () => undefined,
  );
  await pc.stop();
  const back = onC.filter(served).map(
    (x) =>
      Math.min(
        ...pc.asks
          .get(x.id)!
          .filter((q) => q.ok && q.sent >= duePerf)
          .map((q) => q.done),
      ) - duePerf,
  );
  row(`host-c's lease ended after the kill (lease 15s), recoverAfter elapsed`, `${s(leaseEnd - kill)}   ${s(due - kill)}`);
  row(
    `every sleeping server serving again after recoverAfter (n=${onC.length}), goal ≤ 30 s`,
    back.length === onC.length
      ? `${spread(back)}   ${goal(Math.max(...back), 30_000)}`
      : `${onC.length - back.length} not serving 5 min after it (${back.length ? spread(back) : 'none serving'})  MISSED`,
  );
  const notYet = movedIds.filter((id) => !onC.some((x) => x.id === id && served(x)) || id === app.id);
  for (const line of (await db.sql(`SELECT server_id, outcome, coalesce(to_host, '-'), detail FROM recoveries ORDER BY at`)).trim().split('\n'))
    if (notYet.some((id) => line.startsWith(id)) && !line.includes('|recovered|'))
      row('  not recovered (registry: recoveries)', line.replace(/\|/g, ' ').slice(0, 160));
  row('wrong pages during the recovery, goal 0', `${onC.reduce((n, x) => n + wrongs(pc.asks.get(x.id)!, 0, Infinity), 0)}`);
  if ((await placed(app.id)) === 'host-c') return void row('running server', 'not recovered: no figure of lost writes  MISSED');
  const via = (await placed(app.id)) === 'host-a' ? a : b;
  // the newest line written before the kill (its app, woken by this exec, writes on from there)
  const last = Number((await exec(via, app, `awk -v k=${kill} '$1 < k { m = $1 } END { print m }' /root/clock`)).trim());
  row(`running server: its newest checkpoint's age at the kill (interval ${INTERVAL})`, `${s(kill - newest)}`);
  row(`running server: writes lost (kill − its newest line kept), goal ≤ ${INTERVAL}`, `${s(kill - last)}   ${goal(kill - last, secs(INTERVAL))}`);
}

try {
  await main();
} finally {
  // every daemon's log, for the figures' why (moves, drain and recovery log at info and above)
  const logs = mkdtempSync(join(tmpdir(), 'bench-move-logs-'));
  for (const [name, d] of Object.entries(hosts)) writeFileSync(join(logs, `${name}.jsonl`), d.logs.map((l) => JSON.stringify(l)).join('\n') + '\n');
  console.log(`\nthe daemons' logs: ${logs}`);
  for (const d of Object.values(hosts)) await d.remove().catch((e) => console.error('remove:', e));
  await pg?.stop().catch(() => {});
  await s3?.stop().catch(() => {});
  agent.destroy();
  console.log(`\nload ${load()}`);
}
