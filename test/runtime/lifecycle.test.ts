// Lifecycle of one real runc server, shared by the tests of this file in order: create, exec,
// run.sh supervision, sleep/wake, resize, stats, adoption by a new runtime, delete; its cgroup under the
// daemon's own parent (the nft table's name: two daemons of one machine never share one). Runs on
// cgroup v1 and v2, and reaches nothing outside the machine (egress goes to a network namespace
// made for the test).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { run, tryRun } from '../../src/runtime/proc.js';
import { cgroupDirs } from '../../src/runtime/cgroup.js';
import { httpGet, MiB, newId, RUN_SH, sh, startRuntime, waitFor, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const id = newId('life');
let ip = '';

test.before(async () => {
  env = await startRuntime('life', 11);
});
test.after(async () => {
  await env?.cleanup();
});

test('create returns a running server whose commands run as root with the slug as hostname', async () => {
  const s = await env.rt.create({ id, slug: 'life-one', memoryBytes: 256 * MiB, diskBytes: 512 * MiB });
  ip = s.ip;
  assert.is(s.state, 'running');
  assert.match(s.ip, /^10\.199\.11\.\d+$/);
  const r = await sh(env.rt, id, 'id -u; hostname; cat /etc/hostname; echo err >&2; exit 7');
  assert.is(r.code, 7);
  assert.is(r.out, '0\nlife-one\nlife-one\n');
  assert.is(r.err, 'err\n');
  assert.equal(env.rt.get(id)?.state, 'running');
  assert.ok(env.rt.list().some((x) => x.id === id));
});

test("the server's cgroup is under this daemon's own parent, named after its nft table: never another daemon's of the machine", async () => {
  const init = (await env.rt.runc.state(id))!.pid;
  const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
  const line = readFileSync(`/proc/${init}/cgroup`, 'utf8')
    .split('\n')
    .find((l) => (v2 ? l.startsWith('0::') : l.split(':')[1] === 'freezer'));
  assert.is(line?.split(':')[2], `/${env.cfg.runtime.nftTable}/${id}`, line);
  assert.is(env.rt.cgroup(id), `/${env.cfg.runtime.nftTable}/${id}`);
});

test('exec pipes are binary-safe in both directions', async () => {
  const data = randomBytes(300_000);
  const r = env.rt.exec(id, { argv: ['sha256sum'] });
  let out = '';
  r.stdout.on('data', (d) => (out += d));
  r.stdin.end(data);
  assert.is((await r.exited).code, 0);
  assert.is(out.split(' ')[0], createHash('sha256').update(data).digest('hex'));
  const back = env.rt.exec(id, { argv: ['head', '-c', '65536', '/dev/urandom'] });
  const chunks: Buffer[] = [];
  back.stdout.on('data', (d: Buffer) => chunks.push(d));
  back.stdin.end();
  await back.exited;
  assert.is(Buffer.concat(chunks).length, 65536);
});

test('execPty runs on a terminal of the requested size, follows resize and reports the exit status', async () => {
  const p = env.rt.execPty(id, { argv: ['/bin/bash', '--norc', '-i'], cols: 90, rows: 30, term: 'xterm' });
  let out = '';
  p.onData((d) => (out += d.toString()));
  // runc sizes the inner terminal just after the process starts: type once the prompt is there,
  // like a person would (a program started before that gets SIGWINCH with the size).
  assert.ok(await waitFor(() => out.includes('# '), 5000), out);
  await new Promise((r) => setTimeout(r, 200));
  p.write('stty size; tty; echo "TERM=$TERM"\n');
  assert.ok(await waitFor(() => /30 90/.test(out) && /TERM=xterm/.test(out), 5000), out);
  assert.match(out, /\/dev\/pts\/\d+/);
  p.resize(120, 40);
  await new Promise((r) => setTimeout(r, 100));
  p.write('stty size; exit 3\n');
  const exit = await p.exited;
  assert.match(out, /40 120/);
  assert.equal(exit, { code: 3, signal: null });
});

test('run.sh serving /root/www answers on port 80 from the host within about a second, and its output is logged', async () => {
  const w = await sh(
    env.rt,
    id,
    'mkdir -p /root/www && echo hello-from-www > /root/www/index.html && cat > /root/run.sh.new && mv /root/run.sh.new /root/run.sh',
    RUN_SH,
  );
  assert.is(w.code, 0, w.err);
  const started = Date.now();
  const chmod = await sh(env.rt, id, 'chmod +x /root/run.sh');
  assert.is(chmod.code, 0);
  const body = await waitFor(() => httpGet(ip), 5000);
  const took = Date.now() - started;
  assert.is(body, 'hello-from-www\n');
  assert.ok(took < 2500, `port 80 took ${took} ms`);
  const log = await sh(env.rt, id, 'cat /var/log/run.sh.log');
  assert.match(log.out, /run\.sh starting pid/);
  // the host view of the rootfs shows the same file (the proxy serves static sites from it)
  assert.is(readFileSync(join(env.rt.get(id)!.rootfs, 'root/www/index.html'), 'utf8'), 'hello-from-www\n');
});

test('a killed run.sh is started again by the supervisor', async () => {
  const before = await sh(env.rt, id, 'pgrep -f "python3 -c" | head -1');
  assert.match(before.out, /^\d+\n$/);
  await sh(env.rt, id, `kill -9 ${before.out.trim()}`);
  const after = await waitFor(async () => {
    const r = await sh(env.rt, id, 'pgrep -f "python3 -c" | head -1');
    return r.out.trim() && r.out.trim() !== before.out.trim() ? r.out.trim() : null;
  }, 5000);
  assert.ok(after, 'run.sh came back');
  assert.is(await waitFor(() => httpGet(ip), 3000), 'hello-from-www\n');
  const log = await sh(env.rt, id, 'cat /var/log/run.sh.log');
  assert.match(log.out, /exited with status 137/);
});

test('stop frees the container memory (parked: only runc init waits, no user process) but keeps the rootfs mounted; start keeps files and serves again', async () => {
  await sh(env.rt, id, 'echo kept > /root/note.txt');
  const rootfs = env.rt.get(id)!.rootfs;
  await env.rt.stop(id);
  assert.is(env.rt.get(id)?.state, 'sleeping');
  const parked = await env.rt.runc.state(id);
  assert.is(parked?.status, 'created', 'parked (runtime.parkOnSleep): the container made, not started');
  const procs = cgroupDirs(env.rt.cgroup(id)).find((d) => d.includes('/pids/')) ?? cgroupDirs(env.rt.cgroup(id))[0];
  assert.equal(readFileSync(join(procs, 'cgroup.procs'), 'utf8').trim().split('\n'), [String(parked!.pid)], 'nothing but the waiting init');
  assert.is((await env.rt.stats(id)).memoryBytes, 0, 'no memory billed while asleep');
  assert.is(await httpGet(ip, 80, 300), null);
  assert.is(readFileSync(join(rootfs, 'root/note.txt'), 'utf8'), 'kept\n', 'host view stays readable while asleep');
  assert.throws(() => env.rt.exec(id, { argv: ['true'] }), /wake it first/);
  const t = Date.now();
  await env.rt.start(id);
  assert.is(env.rt.get(id)?.state, 'running');
  assert.is(await waitFor(() => httpGet(ip), 3000), 'hello-from-www\n');
  assert.ok(Date.now() - t < 3000);
  assert.is((await sh(env.rt, id, 'cat /root/note.txt')).out, 'kept\n');
});

// Online ext4 growth needs CAP_SYS_RESOURCE; some sandboxes run root without it, and then the
// runtime grows the disk at the next sleep instead. Both paths must end with the bigger disk.
const canGrowOnline = (BigInt('0x' + (/^CapEff:\s+([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0')) >> 24n) & 1n;

/** The memory limit the kernel enforces on a server's cgroup: memory.limit_in_bytes of the
 *  memory controller on cgroup v1, memory.max on v2. */
function memoryLimit(server: string): number {
  const dirs = cgroupDirs(env.rt.cgroup(server));
  const v1 = dirs.find((d) => d.includes('/memory/'));
  assert.ok(v1 ?? dirs[0], 'the server has a cgroup');
  return Number(readFileSync(v1 ? join(v1, 'memory.limit_in_bytes') : join(dirs[0], 'memory.max'), 'utf8').trim());
}

test('resize raises the memory limit live and grows the disk (online, or at the next sleep without CAP_SYS_RESOURCE)', async () => {
  const size = async () => Number((await sh(env.rt, id, 'df -B1M --output=size / | tail -1')).out.trim());
  assert.ok((await size()) < 520);
  await env.rt.resize(id, { memoryBytes: 384 * MiB, diskBytes: 768 * MiB });
  assert.is(memoryLimit(id), 384 * MiB);
  if (!canGrowOnline) {
    await env.rt.stop(id);
    await env.rt.start(id);
  }
  assert.ok((await size()) > 700, `disk size inside after growth`);
  assert.is((await sh(env.rt, id, 'cat /root/note.txt')).out, 'kept\n');
  assert.is(env.rt.get(id)?.diskBytes, 768 * MiB);
  assert.is(statSync(join(env.rt.serverDir(id), 'disk.img')).size, 768 * MiB);
});

/** Stands in for the internet: a network namespace behind a veth of the host, at an address of
 *  TEST-NET-3 (none of the ranges the runtime keeps containers from), serving HTTP that reads a
 *  request body and answers how long it was. Made after the runtime set up its rules (which
 *  block the host's own subnets as they were then) and removed by close(). */
async function outside(): Promise<{ url: string; close(): Promise<void> }> {
  const ns = 'rbt11-out';
  const close = async () => {
    server?.kill('SIGKILL');
    await tryRun('ip', ['netns', 'del', ns]); // takes the veth pair with it
    await tryRun('ip', ['link', 'del', 'rbt11o']);
  };
  let server: ReturnType<typeof spawn> | undefined;
  try {
    await run('ip', ['netns', 'add', ns]);
    await run('ip', ['link', 'add', 'rbt11o', 'type', 'veth', 'peer', 'name', 'rbt11p', 'netns', ns]);
    await run('ip', ['-b', '-'], { input: 'addr add 203.0.113.1/30 dev rbt11o\nlink set rbt11o up\n' });
    await run('ip', ['-n', ns, '-b', '-'], { input: 'addr add 203.0.113.2/30 dev rbt11p\nlink set rbt11p up\nlink set lo up\n' });
    const app = `require('http').createServer((q, s) => { let n = 0; q.on('data', (c) => (n += c.length)); q.on('end', () => s.end('got ' + n)); }).listen(8080, '203.0.113.2', () => console.log('up'))`;
    const child = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', app], { stdio: ['ignore', 'pipe', 'inherit'] });
    server = child;
    await new Promise<void>((resolve, reject) => {
      child.stdout!.once('data', () => resolve());
      child.once('exit', (c) => reject(new Error(`outside server exited (${c})`)));
    });
    return { url: 'http://203.0.113.2:8080/', close };
  } catch (e) {
    await close();
    throw e;
  }
}

test('stats report memory in use, disk used and egress bytes', async () => {
  await sh(env.rt, id, 'head -c 20000000 /dev/urandom > /root/blob');
  const out = await outside();
  let eg: Awaited<ReturnType<typeof sh>>;
  try {
    eg = await sh(env.rt, id, `head -c 200000 /root/blob | curl -sS --max-time 10 --data-binary @- ${out.url}`);
  } finally {
    await out.close();
  }
  const st = await env.rt.stats(id);
  assert.ok(st.memoryBytes > 1 * MiB, `memory ${st.memoryBytes}`);
  assert.ok(st.diskUsedBytes > 20_000_000, `disk ${st.diskUsedBytes}`);
  assert.is(st.oomKills, 0);
  assert.is(eg.out, 'got 200000', `egress through NAT: ${eg.err}`);
  assert.ok(st.egressBytes > 200_000, `egress ${st.egressBytes}`);
});

test('a new runtime instance over the same data dir adopts the running server without restarting it', async () => {
  const pid = (await env.rt.runc.state(id))!.pid;
  const rt2 = await env.restart();
  assert.is(rt2.get(id)?.state, 'running');
  assert.is((await rt2.runc.state(id))!.pid, pid);
  assert.is((await sh(rt2, id, 'cat /root/note.txt')).out, 'kept\n');
  assert.is(await httpGet(ip), 'hello-from-www\n');
});

test('delete leaves no container, mount, loop device, veth, nft counter, cgroup, files or record behind', async () => {
  const dir = env.rt.serverDir(id);
  const img = join(dir, 'disk.img');
  const veth = env.rt.net.vethOf(ip);
  await env.rt.delete(id);
  assert.is(env.rt.get(id), undefined);
  assert.is(env.store.runtime.get(id), undefined);
  assert.is(await env.rt.runc.state(id), undefined);
  assert.is(readFileSync('/proc/self/mountinfo', 'utf8').includes(dir), false, 'no mount');
  assert.is((await run('losetup', ['-a'])).stdout.includes(img), false, 'no loop device');
  assert.is(await tryRun('ip', ['link', 'show', veth]), null, 'no veth');
  const nft = (await run('nft', ['list', 'table', 'inet', env.rt.net.table])).stdout;
  assert.is(nft.includes(ip), false, 'no map element');
  assert.is(nft.includes(`eg_${ip.replace(/\./g, '_')}`), false, 'no counter');
  assert.is(cgroupDirs(env.rt.cgroup(id)).length, 0, 'no cgroup');
  assert.is(existsSync(dir), false, 'no files');
  const again = await env.rt.delete(id).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(String(again?.message), /no server/);
});

test.run();
