// bench/checkpoints/checkpoint.ts: checkpoints of a real runc server behind a real daemon (test
// daemon: its own bridge, subnet and data dir, the directory store under it), each figure printed
// beside a peer, in one run, on two data dirs: an XFS with reflinks that the bench makes on a
// loop device (`mkfs.xfs -m reflink=1` on a sparse file, mounted under /tmp; unmounted, detached
// and removed at the end) and the default one (the machine's /tmp, ext4 here).
// The server is an anonymous one (256 MiB disk) holding 100 MiB of random bytes and an app on :80.
//   1. writes paused during a checkpoint of the running server: p95 over --checkpoints (≥ 10),
//      both as a writer inside the server sees it (the longest pwrite of 4 KiB, one every ~1 ms,
//      while the checkpoint is taken) and as the runtime measured its freeze; peer: a plain
//      `cp --reflink=always` (XFS) / `cp --sparse=always` (ext4) of the same image;
//   2. restore of that server from the directory store (POST /servers/{id}/restore until it
//      answers, and until its app answers HTTP again), goal ≤ 1 s; peer: the same cp; where its
//      time goes: the image written and flushed (as a fork does), unflushed and its flush apart
//      (a restore flushes it beside the stop), the stop, the start;
//   3. fork to a running server that answers HTTP (POST /servers/{id}/fork → its app's first 200
//      through the edge), goal ≤ 1 s; peer: the same cp;
//   4. incremental checkpoint after 10 MiB changed in place: bytes uploaded (the manifest's
//      newBytes, sealed), goal ≤ 12 MiB; peer: the 10 MiB changed.
// The host is shared: expect noise; the load average at the start and end is printed.
//   node --import tsx bench/checkpoints/checkpoint.ts [--checkpoints 12] [--rounds 3] [--no-xfs] [--no-ext4]

import { mkdirSync, rmSync, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestDaemon, type TestDaemon } from '../../test/helpers/daemon.js';
import { run } from '../../test/helpers/run.js';
import { send } from '../../test/http/contract.js';
import { RUN_SH, sh } from '../../test/runtime/helpers/env.js';
import type { ContainerRuntime } from '../../src/runtime/index.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const CHECKPOINTS = Math.max(10, Number(arg('checkpoints', '12')));
const ROUNDS = Number(arg('rounds', '3'));
const MiB = 1024 * 1024;
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)];
const ms = (x: number) => `${x.toFixed(1).padStart(7)} ms`;
const row = (label: string, value: string) => console.log(`  ${label.padEnd(72)}${value}`);
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

/** A writer inside the server: a 4 KiB pwrite into a 1 MiB ring every ~1 ms; on SIGTERM it prints
 *  the longest pwrite it saw (ms). */
const WRITER = `exec python3 -c '
import os, signal, sys, time
fd = os.open("/root/writer.ring", os.O_WRONLY | os.O_CREAT, 0o600)
buf = os.urandom(4096)
longest = 0.0
def done(*_):
    sys.stdout.write("%.3f\\n" % longest); sys.stdout.flush(); os._exit(0)
signal.signal(signal.SIGTERM, done)
sys.stdout.write("ready\\n"); sys.stdout.flush()
i = 0
while True:
    t = time.monotonic()
    os.pwrite(fd, buf, (i % 256) * 4096)
    longest = max(longest, (time.monotonic() - t) * 1000)
    i += 1
    time.sleep(0.001)
'`;

async function timed(cmd: string, args: string[]): Promise<number> {
  const t0 = performance.now();
  const r = await run(cmd, args, { timeoutMs: 120_000 });
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
  return performance.now() - t0;
}

async function bench(label: string, dataDir: string | undefined, reflink: boolean): Promise<void> {
  console.log(`\n${label}`);
  let d: TestDaemon | undefined;
  try {
    d = await startTestDaemon({
      ...(dataDir ? { dataDir } : {}),
      publicIp: '127.0.0.1',
      log: { level: 'warn' },
      hosting: { anonServersPerIp: 20, rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000, createsPerIpPerHour: 1000 } },
      proxy: { idleTimeout: '1h' },
    });
    const dd = d;
    const rt = dd.daemon.runtime as ContainerRuntime;
    const created = await send(dd.http, 'api.localhost', 'POST', '/create');
    if (created.status !== 200) throw new Error(`create: ${created.text}`);
    const { id, api_key: key } = created.json as { id: string; api_key: string };
    const host = `${dd.daemon.store.servers.get(id)!.slug}.localhost`;
    const api = (method: string, path: string, body?: unknown) =>
      send(dd.http, 'api.localhost', method, path, { headers: { authorization: `Bearer ${key}` }, ...(body === undefined ? {} : { body }) });
    const inServer = async (script: string, input?: string) => {
      const r = await sh(rt, id, script, input);
      if (r.code !== 0) throw new Error(`${script}: ${r.err}`);
      return r.out.trim();
    };
    const answers = async (h: string, timeoutMs: number) => {
      const end = performance.now() + timeoutMs;
      while (performance.now() < end) {
        const r = await send(dd.http, h, 'GET', '/').catch(() => null);
        if (r?.status === 200 && r.text.trim() === 'hello') return performance.now();
        await new Promise((res) => setTimeout(res, 5));
      }
      throw new Error(`${h} did not answer within ${timeoutMs} ms`);
    };

    await inServer('mkdir -p /root/www && echo hello > /root/www/index.html && cat > /root/run.sh && chmod +x /root/run.sh', RUN_SH);
    await inServer(`head -c ${100 * MiB} /dev/urandom > /root/data && sync`);
    await answers(host, 30_000);
    const img = join(rt.serverDir(id), 'disk.img');
    const imgMiB = statSync(img).size / MiB;
    const du = Number((await run('du', ['-B1', img])).stdout.split('\t')[0]) / MiB;
    row('server disk image', `${imgMiB.toFixed(0)} MiB, ${du.toFixed(0)} MiB allocated`);

    // the peer: a plain copy of the same image on the same filesystem
    const peerDest = join(rt.serverDir(id), '..', 'peer.img');
    const peerArgs = reflink ? ['--reflink=always', img, peerDest] : ['--sparse=always', img, peerDest];
    const peer: number[] = [];
    for (let i = 0; i < CHECKPOINTS; i++) {
      rmSync(peerDest, { force: true });
      peer.push(await timed('cp', peerArgs));
    }
    rmSync(peerDest, { force: true });
    const peerP95 = pct(peer, 95);
    row(`peer: cp ${peerArgs[0]} of the image (n=${peer.length})`, `p50 ${ms(pct(peer, 50))}   p95 ${ms(peerP95)}`);

    // 1. writes paused during a checkpoint of the running server
    const seen: number[] = [];
    const freeze: number[] = [];
    const methods = new Set<string>();
    const settings = dd.daemon.hosting.core.checkpoints!.settingsOf(
      dd.daemon.store.servers.get(id)!,
      dd.daemon.store.accounts.get(dd.daemon.store.servers.get(id)!.accountId)!,
    );
    let last = '';
    for (let i = 0; i < CHECKPOINTS; i++) {
      const w = rt.exec(id, { argv: ['/bin/bash', '-c', WRITER] });
      let out = '';
      w.stdout.on('data', (c: Buffer) => (out += c.toString()));
      w.stdin.end();
      while (!out.includes('ready')) await new Promise((r) => setTimeout(r, 10));
      await new Promise((r) => setTimeout(r, 100));
      const taken = await dd.daemon.checkpoints.take(id, settings, 'manual', `bench ${i}`);
      await new Promise((r) => setTimeout(r, 100));
      await w.signalAll('TERM');
      await w.exited;
      seen.push(Number(out.trim().split('\n').pop()));
      freeze.push(taken.pausedMs);
      methods.add(taken.method);
      last = taken.manifest.id;
    }
    const p95 = pct(seen, 95);
    row(
      `writes paused, as the writer saw it (${[...methods].join('/')}; n=${seen.length})`,
      `p50 ${ms(pct(seen, 50))}   p95 ${ms(p95)}   ×${(p95 / peerP95).toFixed(2)} peer`,
    );
    row(
      'writes paused, as the runtime measured its freeze',
      `p50 ${ms(pct(freeze, 50))}   p95 ${ms(pct(freeze, 95))}   ×${(pct(freeze, 95) / peerP95).toFixed(2)} peer`,
    );
    // the record the API keeps for the checkpoints taken through the service
    const cid = (await api('POST', `/servers/${id}/checkpoints`, { comment: 'bench restore' })).json.id as string;
    if (!cid) throw new Error('no checkpoint through the API');
    void last;

    // 2. restore from the directory store
    const restored: number[] = [];
    const serving: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      await inServer('echo changed > /root/changed && sync');
      const t0 = performance.now();
      const r = await api('POST', `/servers/${id}/restore`, { checkpoint: cid });
      const t1 = performance.now();
      if (r.status !== 200) throw new Error(`restore: ${r.text}`);
      restored.push(t1 - t0);
      serving.push((await answers(host, 30_000)) - t0);
      if ((await inServer('test -e /root/changed; echo $?')) !== '1') throw new Error('the restore kept a later file');
    }
    row(
      `restore (API answer; n=${ROUNDS}), goal ≤ 1000 ms`,
      `p50 ${ms(pct(restored, 50))}   max ${ms(Math.max(...restored))}   ×${(pct(restored, 50) / 1000).toFixed(2)} goal`,
    );
    // where a restore's time goes: the image written from the store (flushed, as a fork does; and
    // unflushed, then its flush apart, which a restore runs beside the stop), and the server's
    // stop + start
    const m = await dd.daemon.checkpoints.get(id, cid);
    const scratch = join(rt.serverDir(id), '..', 'bench-materialize.img');
    const fill: number[] = [];
    const unflushed: number[] = [];
    const flushes: number[] = [];
    const stops: number[] = [];
    const starts: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = performance.now();
      await dd.daemon.checkpoints.materialize(m, scratch);
      fill.push(performance.now() - t0);
      rmSync(scratch, { force: true });
      const tb = performance.now();
      await dd.daemon.checkpoints.engine.materialize(m, scratch, { sync: false });
      unflushed.push(performance.now() - tb);
      const tf = performance.now();
      const fh = await open(scratch, 'r+');
      await fh.sync();
      await fh.close();
      flushes.push(performance.now() - tf);
      rmSync(scratch, { force: true });
      const t1 = performance.now();
      await rt.stop(id, { park: false });
      const t2 = performance.now();
      await rt.start(id);
      stops.push(t2 - t1);
      starts.push(performance.now() - t2);
    }
    row(
      `restore: the image written from the store alone (${(m.dataBytes / MiB).toFixed(0)} MiB, verified)`,
      `p50 ${ms(pct(fill, 50))}   max ${ms(Math.max(...fill))}`,
    );
    row('restore: the image as a restore writes it (unflushed)', `p50 ${ms(pct(unflushed, 50))}   max ${ms(Math.max(...unflushed))}`);
    row('restore: then its flush (beside the stop)', `p50 ${ms(pct(flushes, 50))}   max ${ms(Math.max(...flushes))}`);
    row(`restore: the server's stop alone (stopGrace ${dd.cfg.runtime.stopGrace} ms)`, `p50 ${ms(pct(stops, 50))}   max ${ms(Math.max(...stops))}`);
    row("restore: the server's start alone", `p50 ${ms(pct(starts, 50))}   max ${ms(Math.max(...starts))}`);
    await answers(host, 30_000);
    row('restore until its app answers HTTP again', `p50 ${ms(pct(serving, 50))}   max ${ms(Math.max(...serving))}`);

    // 3. fork to a running server that answers HTTP
    const forked: number[] = [];
    const forkApi: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = performance.now();
      const f = await api('POST', `/servers/${id}/fork`, { checkpoint: cid });
      forkApi.push(performance.now() - t0);
      if (f.status !== 201) throw new Error(`fork: ${f.text}`);
      forked.push((await answers(f.json.subdomain as string, 30_000)) - t0);
      const del = await send(dd.http, 'api.localhost', 'DELETE', `/servers/${f.json.id}`, { headers: { authorization: `Bearer ${key}` } });
      if (del.status !== 200) throw new Error(`delete the fork: ${del.text}`);
    }
    row(
      `fork → its app answers HTTP (n=${ROUNDS}), goal ≤ 1000 ms`,
      `p50 ${ms(pct(forked, 50))}   max ${ms(Math.max(...forked))}   ×${(pct(forked, 50) / 1000).toFixed(2)} goal`,
    );
    row('fork: the API answer alone', `p50 ${ms(pct(forkApi, 50))}   max ${ms(Math.max(...forkApi))}`);
    // beside it: a new server from the base image (POST /create), which a fork is plus the image
    const plain: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = performance.now();
      const c = await send(dd.http, 'api.localhost', 'POST', '/create', { headers: { authorization: `Bearer ${key}` } });
      plain.push(performance.now() - t0);
      if (c.status !== 200) throw new Error(`create: ${c.text}`);
      await send(dd.http, 'api.localhost', 'DELETE', `/servers/${c.json.id}`, { headers: { authorization: `Bearer ${key}` } });
    }
    row('peer: POST /create from the base image (API answer)', `p50 ${ms(pct(plain, 50))}   max ${ms(Math.max(...plain))}`);

    // 4. incremental checkpoint of 10 MiB changed in place
    const up: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      await inServer(`head -c ${10 * MiB} /dev/urandom | dd of=/root/data bs=1M seek=${(i % 9) * 10} conv=notrunc status=none && sync`);
      const taken = await dd.daemon.checkpoints.take(id, settings, 'manual', `bench incremental ${i}`);
      up.push(taken.manifest.newBytes / MiB);
    }
    row(
      `incremental checkpoint, 10 MiB changed: uploaded (n=${ROUNDS}), goal ≤ 12 MiB`,
      `p50 ${pct(up, 50).toFixed(2).padStart(7)} MiB   max ${Math.max(...up).toFixed(2)} MiB   ×${(pct(up, 50) / 10).toFixed(2)} peer (10 MiB)`,
    );
  } finally {
    await d?.stop();
  }
}

/** An XFS with reflinks on a loop device over a sparse file under /tmp; returns its data dir and the undo. */
async function makeXfs(): Promise<{ dataDir: string; undo: () => Promise<void> }> {
  const base = join(tmpdir(), `rbx-ckbench-xfs-${process.pid}`);
  const file = `${base}.img`;
  const mnt = `${base}.mnt`;
  let loop = '';
  let mounted = false;
  const undo = async () => {
    if (mounted) await run('umount', [mnt]);
    if (loop) await run('losetup', ['-d', loop]);
    rmSync(mnt, { recursive: true, force: true });
    rmSync(file, { force: true });
  };
  try {
    await run('truncate', ['-s', '4G', file]);
    loop = (await run('losetup', ['--find', '--show', file])).stdout.trim();
    if (!loop) throw new Error('losetup gave no device');
    const mk = await run('mkfs.xfs', ['-q', '-f', '-m', 'reflink=1', loop]);
    if (mk.code !== 0) throw new Error(`mkfs.xfs: ${mk.stderr}`);
    mkdirSync(mnt, { mode: 0o700 });
    const m = await run('mount', [loop, mnt]);
    if (m.code !== 0) throw new Error(`mount: ${m.stderr}`);
    mounted = true;
    const dataDir = join(mnt, 'data');
    mkdirSync(dataDir, { mode: 0o700 });
    return { dataDir, undo };
  } catch (e) {
    await undo();
    throw e;
  }
}

console.log(`bench/checkpoints/checkpoint: ${CHECKPOINTS} checkpoints per data dir, ${ROUNDS} restores, forks and incremental checkpoints; load ${load()}`);
if (!process.argv.includes('--no-xfs')) {
  const xfs = await makeXfs();
  try {
    await bench('data dir on XFS with reflinks (loop device)', xfs.dataDir, true);
  } finally {
    await xfs.undo();
  }
}
if (!process.argv.includes('--no-ext4')) {
  const fs = (await run('df', ['--output=fstype', tmpdir()])).stdout.trim().split('\n').pop();
  await bench(`default data dir (${tmpdir()}, ${fs})`, undefined, false);
}
console.log(`\nload ${load()}`);
