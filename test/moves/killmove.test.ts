// kill -9 during a move (issue 38 item 5): two real daemons as processes (ProcDaemon: host-a and
// host-b, either can be SIGKILLed) on a real PostgreSQL registry, their checkpoints in a real S3
// store (Ceph RGW) behind a proxy of each host's own that can hold a chosen request
// (../checkpoints/helpers/holdproxy.ts). Each round moves the server from the host that has it to
// the other one, sleeping or running, and kills the source or the target at a point chosen by a
// seeded PRNG (ROOTBOX_TEST_SEED repeats a run) — a point, not a moment: the daemon is held there
// (a store request of its held, a registry table lock it waits on, or the peer stopped with
// SIGSTOP) when the SIGKILL comes:
//   - the source, while its checkpoint before the move is written (the pending marker held);
//   - the target, while it stages a running server's checkpoint before the stop (moves/prepare.ts:
//     its k-th chunk read held; such a round always moves a running server);
//   - the target, while it restores (its k-th chunk read held; a running server's first one after
//     the staging);
//   - the source, while the target restores (the move's checkpoint is in the store); or killed
//     and started again before the target goes on (the target must then not take the placement
//     from the run that asked: the restarted source has its copy);
//   - the target, while its placement write waits (a SHARE lock on placements: its transaction
//     never commits); the source, at that same point (the target then takes the placement);
//   - the target, having taken the placement, before it answered (its SSH key's record waits);
//   - the source, once the target answered, before it read the answer (the source stopped);
//   - the target, right after it answered.
// The killed daemon starts again on its data dir. Then exactly one host has the server — the one
// the point implies (the source when the target never took the placement, else the target) — its
// runc container, disk and records there alone, the other host answering for it by forwarding
// (its page through both edges, commands through both APIs), its /root/data byte-identical
// (sha256) to what was written before the move (the move's checkpoint when the target took it);
// and a move again succeeds. Last, the registry going down between the target's taking the
// placement and the source reading it (the target's answer lost): the source must not start its
// copy again while it cannot know; afterwards one host serves it, with that disk.
// ROOTBOX_TEST_ROUNDS (default 6, at least 5; 10 covers every point) and ROOTBOX_TEST_POINTS=a,b
// (those points only, in that order) change what a run does.

import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import pg from 'pg';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import { freePort } from '../helpers/ports.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { rng } from '../helpers/rng.js';
import { run } from '../helpers/run.js';
import { startS3, type TestS3 } from '../helpers/s3.js';
import { until } from '../helpers/wait.js';
import { HoldProxy } from '../checkpoints/helpers/holdproxy.js';
import { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { get } from '../registry/fixtures/clients.js';
import { api, clusterOpts, startClusterRegistry } from '../registry/fixtures/twohosts.js';

const SEED = Number(process.env.ROOTBOX_TEST_SEED ?? Math.floor(Math.random() * 2 ** 31));
const ROUNDS = Math.max(5, Number(process.env.ROOTBOX_TEST_ROUNDS ?? 6));
const PREFIX = 'cluster';
/** What the source logs when the target's answer is lost and the registry cannot say whether the target took the server. */
const OUTCOME_UNKNOWN = 'the move’s outcome is unknown until the registry answers: the server stays held';

type Point =
  | 'source-checkpointing'
  | 'target-staging'
  | 'target-restoring'
  | 'source-while-target-restores'
  | 'source-back-while-target-restores'
  | 'target-at-placement'
  | 'source-while-target-places'
  | 'target-placed-unanswered'
  | 'source-answered-unread'
  | 'target-answered';
const POINTS: Point[] = [
  'source-checkpointing',
  'target-staging',
  'target-restoring',
  'source-while-target-restores',
  'source-back-while-target-restores',
  'target-at-placement',
  'source-while-target-places',
  'target-placed-unanswered',
  'source-answered-unread',
  'target-answered',
];
/** Where the server must be after a kill at the point: the target only once it took the placement. */
const endsOn = (p: Point): 'source' | 'target' =>
  ['source-checkpointing', 'target-staging', 'target-restoring', 'source-back-while-target-restores', 'target-at-placement'].includes(p) ? 'source' : 'target';

interface Host {
  name: string;
  d: ProcDaemon;
  proxy: HoldProxy;
}
let s3: TestS3;
let db: TestPostgres;
const hosts: Host[] = [];
const srv = { id: '', slug: '', key: '', page: randomBytes(2000) };
const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };

const placed = async () => (await db.sql(`SELECT host FROM placements WHERE server_id = '${srv.id}'`)).trim();
const hostNamed = (name: string) => hosts.find((h) => h.name === name)!;
const other = (h: Host) => hosts.find((x) => x !== h)!;
const env = (h: Host) => ({ ...process.env, ROOTBOX_CONFIG: h.d.cfgFile });
/** `rootbox servers move` on `from` (its admin socket), to the other host, asked once: a target
 *  just started or restarted, its channel session not open yet, is waited for by the move itself. */
const move = (from: Host) => adminCli(['servers', 'move', srv.id, '--to', other(from).name, '--json'], env(from));

/** A command in the server through `via`'s API (forwarded to its owner; a 503 while a restarted
 *  peer is not reached again is tried again, for up to 30 s). */
async function exec(via: Host, command: string): Promise<string> {
  let r = await api(via.d, 'POST', `/servers/${srv.id}/exec`, { key: srv.key, body: { command, timeout: 120 } });
  for (const end = Date.now() + 30_000; r.status === 503 && Date.now() < end;)
    r = await new Promise((w) => setTimeout(w, 200)).then(() =>
      api(via.d, 'POST', `/servers/${srv.id}/exec`, { key: srv.key, body: { command, timeout: 120 } }),
    );
  assert.is(r.status, 200, `${command} through ${via.name}: ${r.text}`);
  assert.is(r.json.exit_code, 0, `${command}: ${r.json.stderr}`);
  return String(r.json.stdout).trim();
}
const state = async (via: Host) => (await api(via.d, 'GET', `/servers/${srv.id}`, { key: srv.key })).json?.state as string | undefined;
const runcIds = async (h: Host) => (await run('runc', ['--root', join(h.d.dataDir, 'runc'), 'list', '-q'])).stdout.split('\n').filter(Boolean);
/** Whether `h` logged `msg` of the server since its log line `from`. */
const said = (h: Host, msg: string, from: number) => h.d.logs.slice(from).some((l) => l.msg === msg && (l.server === srv.id || l.id === srv.id));

/** A registry table locked in SHARE mode by a session of the test (reads go on, writes wait). */
async function lockTable(table: string): Promise<{ waiters(): Promise<number>; release(): Promise<void> }> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  await c.query('BEGIN');
  await c.query(`LOCK TABLE ${table} IN SHARE MODE`);
  return {
    waiters: async () =>
      Number(await db.sql(`SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE NOT l.granted AND c.relname = '${table}'`)),
    release: async () => {
      await c.query('ROLLBACK').catch(() => {});
      await c.end().catch(() => {});
    },
  };
}

test.before(async () => {
  console.log(`  seed ${SEED} (ROOTBOX_TEST_SEED=${SEED} repeats this run)`);
  s3 = await startS3();
  const bucket = await s3.bucket();
  Object.assign(process.env, s3.env); // the daemons' environment: where S3 credentials are read
  db = await startClusterRegistry();
  for (const name of ['host-a', 'host-b']) {
    const proxy = new HoldProxy(s3.endpoint, `/${bucket}/${PREFIX}/`);
    await proxy.start();
    const o = clusterOpts(db, name, await freePort());
    const d = new ProcDaemon({
      config: {
        ...o,
        hosting: { ...o.hosting, rateLimit: { perIpPerMinute: 100_000, perKeyPerMinute: 100_000, createsPerIpPerHour: 1000 } },
        proxy: { idleTimeout: '1h', wakeTimeout: '30s' },
        checkpoints: {
          store: `s3://${bucket}/${PREFIX}`,
          // a request the proxy held and then dropped is sent again: the daemon that was not killed goes on
          s3: { endpoint: proxy.url, connectTimeout: '2s', timeout: '60s', maxAttempts: 2 },
          interval: 0, // only the moves' checkpoints (and the sleeps')
        },
      },
    });
    hosts.push({ name, d, proxy });
  }
  for (const h of hosts) await h.d.start();
  const [a] = hosts;
  srv.slug = `km${randomBytes(3).toString('hex')}`;
  const r = await api(a.d, 'POST', '/create', { body: { subdomains: [srv.slug] } });
  assert.is(r.status, 200, r.text);
  srv.id = r.json.id;
  srv.key = r.json.api_key;
  await exec(a, `mkdir -p /root/www && echo ${srv.page.toString('base64')} | base64 -d > /root/www/index.html && sync`);
});

test.after(async () => {
  for (const h of hosts) {
    await h.d.remove();
    await h.proxy.stop();
  }
  await db?.stop();
  await s3?.stop();
  for (const [k, v] of [
    ['AWS_ACCESS_KEY_ID', saved.id],
    ['AWS_SECRET_ACCESS_KEY', saved.secret],
  ] as const)
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
});

/** Exactly one host has the server, `holder`: its container, disk and records there alone, the
 *  other answering for it by forwarding; its /root/data is `sha`. */
async function oneHost(holder: Host, sha: string, what: string): Promise<void> {
  const away = other(holder);
  await until(`${what}: the registry places it on ${holder.name}`, async () => ((await placed()) === holder.name ? true : undefined), 60_000, 100).catch(
    async (e: Error) => assert.unreachable(`${e.message} (on ${await placed()})`),
  );
  // the other host's copy (a stale one after a restart) goes: no container, no disk
  await until(
    `${what}: ${away.name} holds nothing of it`,
    async () => !(await runcIds(away)).includes(srv.id) && !existsSync(join(away.d.dataDir, 'servers', srv.id)),
    60_000,
    200,
  ).catch(async (e: Error) => assert.unreachable(`${e.message}: runc ${JSON.stringify(await runcIds(away))}`));
  for (const via of hosts) {
    assert.is(await exec(via, `sha256sum /root/data | cut -d' ' -f1`), sha, `${what}: /root/data through ${via.name}`);
    const page = () => get({ http: via.d.http, https: via.d.https, ca: '' }, `${srv.slug}.localhost`, '/index.html');
    let g = await page();
    for (const end = Date.now() + 30_000; g.status === 503 && Date.now() < end;) g = await new Promise((w) => setTimeout(w, 200)).then(page);
    assert.is(g.status, 200, `${what}: its page through ${via.name}: ${g.status} ${g.body.subarray(0, 200).toString()}`);
    assert.ok(g.body.equals(srv.page), `${what}: its page through ${via.name}, byte for byte`);
  }
  assert.ok((await runcIds(holder)).includes(srv.id), `${what}: ${holder.name} runs it`);
  assert.not.ok((await runcIds(away)).includes(srv.id), `${what}: no container of it on ${away.name}`);
  assert.not.ok(existsSync(join(away.d.dataDir, 'servers', srv.id)), `${what}: no disk of it on ${away.name}`);
}

/** Arms the point, runs the move, kills the victim there, lets the rest go on, starts the victim again. */
async function killAt(point: Point, source: Host, target: Host, running: boolean, k: number): Promise<void> {
  const victim = point.startsWith('source') ? source : target;
  const from = target.d.logs.length;
  /** The target's side of the move ended (it took the server, or gave it up). */
  const targetDone = () =>
    until(
      'the target to end its side',
      () => said(target, 'server moved here', from) || said(target, 'a moved server was not taken; the source keeps it', from),
      120_000,
      20,
    );
  /** A chunk read of the target's restore at the hand-over. A running server's move first stages
   *  its checkpoint there while it runs (moves/prepare.ts): those reads are not the restore, and
   *  the hand-over then patches the staged image with the few chunks the stop changed (the
   *  filesystem's unmount writes one at least), so its first read is held. */
  const restoreRead = (r: { method: string; key: string }) =>
    r.method === 'GET' &&
    r.key.startsWith('chunks/') &&
    (!running || said(target, 'a running server’s checkpoint staged for its move here', from) || said(target, 'taking a server moved here', from));
  const restorePass = running ? 0 : k;
  let moving: ReturnType<typeof move> | undefined;
  const start = () => (moving = move(source));
  /** `p`, unless the move ends first (it never reached the point: the test's failure, said with the move's answer). */
  const before = <T>(p: Promise<T>): Promise<T> =>
    Promise.race([
      p,
      moving!.then((r) => {
        throw new Error(`the move ended before ${point} (${r.code}): ${r.stderr}${r.stdout}`);
      }),
    ]);
  /** The victim killed, what held the move let go (`release`), then the move's answer awaited. */
  const settle = async (release: () => unknown = () => {}) => {
    await victim.d.kill();
    await release();
    const r = await moving!;
    console.log(`    the move answered ${r.code === 0 ? 'done' : r.stderr.trim().slice(0, 200)}`);
  };
  switch (point) {
    case 'source-checkpointing': {
      // a running server's first checkpoint is taken while it runs: the move's own is the second
      const held = source.proxy.hold((r) => r.method === 'PUT' && r.key.startsWith('pending/'), running ? 1 : 0);
      start();
      await before(held);
      await settle(() => source.proxy.release());
      break;
    }
    case 'target-staging': {
      const staged = () => said(target, 'a running server’s checkpoint staged for its move here', from) || said(target, 'taking a server moved here', from);
      const held = target.proxy.hold((r) => r.method === 'GET' && r.key.startsWith('chunks/') && !staged(), k);
      start();
      await before(held);
      await settle(() => target.proxy.release());
      break;
    }
    case 'target-restoring':
    case 'source-while-target-restores': {
      const held = target.proxy.hold(restoreRead, restorePass);
      start();
      await before(held);
      await settle(() => target.proxy.release());
      break;
    }
    case 'source-back-while-target-restores': {
      // the source killed and started again before the target takes the placement: it has its copy
      // (and may serve it) from then on, so the target must not take the placement from the run that asked
      const held = target.proxy.hold(restoreRead, restorePass);
      start();
      await before(held);
      await victim.d.kill();
      await source.d.start();
      target.proxy.release();
      await moving!;
      await targetDone();
      return;
    }
    case 'target-at-placement':
    case 'source-while-target-places':
    case 'target-placed-unanswered': {
      // the target's placement write (its moveHere transaction), or its SSH key's record right after it
      const lock = await lockTable(point === 'target-placed-unanswered' ? 'server_keys' : 'placements');
      try {
        start();
        await before(until(`the target's write to wait on the lock (${point})`, async () => (await lock.waiters()) > 0, 120_000, 20));
        await settle(() => lock.release());
      } finally {
        await lock.release();
      }
      break;
    }
    case 'source-answered-unread': {
      const lock = await lockTable('server_keys');
      try {
        start();
        await before(until("the target's key record to wait on the lock", async () => (await lock.waiters()) > 0, 120_000, 20));
        // the source waits for the answer: stopped, it never reads it
        process.kill(source.d.child!.pid!, 'SIGSTOP');
      } finally {
        await lock.release();
      }
      await until('the target to answer', () => said(target, 'server moved here', from), 60_000, 10);
      await settle();
      break;
    }
    case 'target-answered': {
      start();
      await before(until('the target to answer', () => said(target, 'server moved here', from), 120_000, 2));
      await settle();
      break;
    }
  }
  // a source that died after it asked the target: started again once the target ended its side
  // (else the point would be a race between the two; source-back-while-target-restores is the other order)
  if (victim === source && point !== 'source-checkpointing') await targetDone();
  await victim.d.start();
}

/** The warnings and errors of both hosts' runs since `from` (a failure's context). */
function dump(e: unknown): never {
  for (const h of hosts)
    for (const l of h.d.logs)
      if (l.level === 'warn' || l.level === 'error' || l.stderr || /mov/.test(String(l.msg))) console.error(`${h.name}:`, JSON.stringify(l).slice(0, 700));
  throw e;
}

test(`kill -9 of the source or the target at seeded points of ${ROUNDS} moves: one host serves the server, with the move's disk; a move again succeeds`, async () => {
  const rand = rng(SEED);
  // every point once before any twice, in an order the seed draws (ROOTBOX_TEST_POINTS=a,b: those only)
  const chosen = process.env.ROOTBOX_TEST_POINTS?.split(',').filter((p): p is Point => (POINTS as string[]).includes(p));
  const order = chosen?.length ? chosen : [...POINTS];
  if (!chosen?.length)
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
  for (let i = 0; i < ROUNDS; i++) {
    const point = order[i % order.length];
    // only a running server's move stages its checkpoint on the target first
    const drawn = rand() < 0.5;
    const running = point === 'target-staging' || drawn;
    const k = Math.floor(rand() * 3);
    const source = hostNamed(await placed());
    const target = other(source);
    const what = `round ${i + 1} (${point}, ${running ? 'running' : 'sleeping'}, ${source.name} → ${target.name}${point === 'target-staging' ? `, chunk ${k}` : point.includes('restor') ? `, chunk ${running ? 0 : k}` : ''})`;
    console.log(`  ${what}`);
    const t0 = Date.now();
    const sha = await exec(source, `head -c 3000000 /dev/urandom > /root/data && sync && sha256sum /root/data | cut -d' ' -f1`);
    if (!running) {
      const stop = await adminCli(['servers', 'stop', srv.id], env(source));
      assert.is(stop.code, 0, stop.stderr);
      await until(`${what}: asleep`, async () => ((await state(source)) === 'sleeping' ? true : undefined), 30_000, 100);
    } else assert.is(await state(source), 'running');
    const holder = endsOn(point) === 'source' ? source : target;
    try {
      await killAt(point, source, target, running, k);
      await oneHost(holder, sha, what);
      // and it moves again, from where it is
      const again = await move(holder);
      assert.is(again.code, 0, `${what}: a move again: ${again.stderr}${again.stdout}`);
      await oneHost(other(holder), sha, `${what}, moved again`);
    } catch (e) {
      dump(e);
    }
    console.log(`    ${holder.name} had it, and it moved again to ${other(holder).name}: ${Date.now() - t0} ms`);
  }
});

/** `p`'s answer, or 'held' when it did not come within `ms` (`cancel` then ends the request). */
async function heldOr<T>(p: Promise<T>, ms: number, cancel: () => void = () => {}): Promise<T | 'held'> {
  let t: NodeJS.Timeout | undefined;
  const r = await Promise.race([p, new Promise<'held'>((resolve) => (t = setTimeout(() => resolve('held'), ms)))]).finally(() => clearTimeout(t));
  if (r === 'held') cancel();
  return r;
}

/** The server's page through `h`'s edge over HTTPS (its certificate not checked: the registry's
 *  edge CA may not be at hand while the registry is down), or 'held' after `ms`. */
function httpsPage(h: Host, ms: number): Promise<{ status: number; body: Buffer } | 'held'> {
  const host = `${srv.slug}.localhost`;
  let req: ReturnType<typeof httpsRequest> | undefined;
  const answer = new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
    req = httpsRequest(
      { host: '127.0.0.1', port: h.d.https, servername: host, path: '/index.html', rejectUnauthorized: false, agent: false, headers: { host } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (x: Buffer) => chunks.push(x));
        res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
  answer.catch(() => {}); // a request ended after the wait
  return heldOr(answer, ms, () => req?.destroy());
}

/** What `h` answers for the server while it may not know where it runs: its page and a command held or
 *  refused (never its copy's answer), and no container of it running there. */
async function notServedBy(h: Host, what: string): Promise<void> {
  const plain = await heldOr(
    get({ http: h.d.http, https: h.d.https, ca: '' }, `${srv.slug}.localhost`, '/index.html').catch((e: Error) => ({
      status: 0,
      body: Buffer.from(e.message),
    })),
    5000,
  );
  const tls = await httpsPage(h, 5000).catch((e: Error) => ({ status: 0, body: Buffer.from(e.message) }));
  const command = await heldOr(api(h.d, 'POST', `/servers/${srv.id}/exec`, { key: srv.key, body: { command: 'echo ran', timeout: 10 } }), 10_000);
  console.log(
    `  ${what}: page ${plain === 'held' ? 'held' : plain.status}, over HTTPS ${tls === 'held' ? 'held' : tls.status}, command ${command === 'held' ? 'held' : `${command.status} ${command.json?.error ?? ''}`}`,
  );
  for (const [how, p] of [
    ['its page', plain],
    ['its page over HTTPS', tls],
  ] as const)
    assert.ok(p === 'held' || (p.status !== 200 && !p.body.equals(srv.page)), `${what}: ${how} not served from its copy (${p === 'held' ? '' : p.status})`);
  assert.ok(command === 'held' || command.status !== 200, `${what}: a command not run in its copy (${command === 'held' ? '' : command.text})`);
  assert.not.ok((await runcIds(h)).includes(srv.id), `${what}: no container of it on ${h.name}`);
}

// The last test also kills the source (-9) while the registry is still down and starts it again
// with the registry down: only what it kept on disk (the mark of the move asked, registry/asked.ts)
// says the outcome is unknown. Its page (HTTP and HTTPS through its edge) and a command through its
// API are held or refused, never answered by its copy, and no container of it runs there; once the
// registry is back the target alone serves it and the source holds nothing of it.
test("the registry down between the target's taking the placement and the source's reading it (the answer lost): the source does not start its copy again, nor after a kill -9 and a start with the registry still down; one host serves it afterwards", async () => {
  const source = hostNamed(await placed());
  const target = other(source);
  const sha = await exec(source, `head -c 3000000 /dev/urandom > /root/data && sync && sha256sum /root/data | cut -d' ' -f1`);
  assert.is(await state(source), 'running');
  const lock = await lockTable('server_keys');
  const seen = source.d.current().length;
  let moving: ReturnType<typeof move>;
  try {
    moving = move(source);
    await until("the target's key record to wait (its placement taken)", async () => (await lock.waiters()) > 0, 120_000, 20);
    assert.is(await placed(), target.name, 'the target took the placement');
    // stopped, the target writes nothing more; the registry goes; then the target dies unanswered
    process.kill(target.d.child!.pid!, 'SIGSTOP');
  } finally {
    await lock.release();
  }
  await db.halt();
  try {
    await target.d.kill();
    // the source either gives up (the move failed: its copy started again) or waits to learn how the move ended
    const gaveUp = await Promise.race([
      moving!.then(() => true),
      until(
        'the source to wait for the registry',
        () =>
          source.d
            .current()
            .slice(seen)
            .some((l) => l.msg === OUTCOME_UNKNOWN),
        60_000,
        20,
      ).then(() => false),
    ]);
    console.log(`  with the registry down, the source ${gaveUp ? 'gave the move up' : 'waits for it'}`);
    // a copy started on the source now would run beside the target's once the target is back
    assert.not.ok((await runcIds(source)).includes(srv.id), 'the source did not start its copy again while the registry was down');
    // the source dies (-9) and starts again, the registry still down: only what it kept on disk
    // says the move's outcome is unknown
    await source.d.kill();
    await source.d.start();
    await notServedBy(source, 'the source started again with the registry down');
  } finally {
    await db.start();
  }
  await target.d.start();
  const r = await moving!;
  console.log(`  the move answered ${r.code === 0 ? 'done' : r.stderr.trim().slice(0, 200)}`);
  await oneHost(target, sha, 'after the registry came back');
  assert.not.ok(
    source.d.current().some((l) => l.msg === 'a server whose move did not happen runs here again' && l.server === srv.id),
    'the source never ran its copy again',
  );
  const again = await move(target);
  assert.is(again.code, 0, `a move again: ${again.stderr}${again.stdout}`);
  await oneHost(source, sha, 'moved again');
});

test.run();
