// What a wake does and does not do, with a real runc server: the server's user and network
// namespaces (uid map, eth0, its veth on the bridge) are made once and kept while it sleeps, so a
// start joins them and spawns only runc create (runc start is an open of its exec fifo); a pair
// missing or half made (a crash part-way, a host reboot that dropped the pins) is made again; the
// supervisor starts run.sh before any bookkeeping of its own. Parking is off here (this is the
// path of a server that is not parked; park.test.ts covers parked wakes).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readFileSync } from 'node:fs';
import { mountedPaths } from '../../src/runtime/disk.js';
import { nsPaths } from '../../src/runtime/network.js';
import { run, tryRun } from '../../src/runtime/proc.js';
import { httpGet, MiB, newId, RUN_SH, sh, startRuntime, waitFor, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const id = newId('w');
let ip = '';

test.before(async () => {
  env = await startRuntime('wake', 53, { parkOnSleep: 'off' });
  ip = (await env.rt.create({ id, slug: 'wakepath', memoryBytes: 128 * MiB, diskBytes: 160 * MiB })).ip;
  const w = await sh(env.rt, id, 'mkdir -p /root/www && echo woke > /root/www/index.html && cat > /root/run.sh && chmod +x /root/run.sh', RUN_SH);
  assert.is(w.code, 0, w.err);
  assert.is(await waitFor(() => httpGet(ip), 10_000), 'woke\n');
});
test.after(async () => {
  await env?.cleanup();
});

const ns = () => nsPaths(env.rt.serverDir(id));
const veth = () => env.rt.net.vethOf(ip);
/** The container init's network and user namespace inodes, seen from the host. */
async function nsOfInit(): Promise<{ net: string; user: string }> {
  const pid = (await env.rt.runc.state(id))!.pid;
  return { net: (await run('readlink', [`/proc/${pid}/ns/net`])).stdout.trim(), user: (await run('readlink', [`/proc/${pid}/ns/user`])).stdout.trim() };
}
const pinned = async () => ({
  net: (await run('stat', ['-L', '-c', 'net:[%i]', ns().net])).stdout.trim(),
  user: (await run('stat', ['-L', '-c', 'user:[%i]', ns().user])).stdout.trim(),
});

test('a sleeping server keeps its namespaces and veth; a wake joins the same ones and serves', async () => {
  const before = await nsOfInit();
  assert.equal(before, await pinned(), 'the running container is in the pinned namespaces');
  await env.rt.stop(id);
  assert.is(env.rt.get(id)?.state, 'sleeping');
  assert.is(await env.rt.runc.state(id), undefined, 'no container while asleep');
  assert.ok(existsSync(`/sys/class/net/${veth()}`), 'the veth stays on the bridge');
  const m = mountedPaths();
  assert.ok(m.has(ns().net) && m.has(ns().user), 'both namespaces stay pinned');
  const steps: string[] = [];
  env.rt.trace = (step) => steps.push(step);
  try {
    await env.rt.start(id);
  } finally {
    env.rt.trace = undefined;
  }
  assert.equal(steps, ['store (beside runc)', 'mounts (kept)', 'namespaces + veth (kept)', 'runc create', 'runc start']);
  assert.equal(await nsOfInit(), before, 'the same network and user namespaces');
  assert.is(await waitFor(() => httpGet(ip), 10_000), 'woke\n');
  const inside = await sh(env.rt, id, 'cat /proc/self/uid_map; ip -4 -o addr show eth0; ip route; cat /proc/sys/net/ipv4/ping_group_range; ip -o link show lo');
  assert.is(inside.code, 0, inside.err);
  const base = env.store.runtime.get(id)!.uidBase;
  assert.match(inside.out, new RegExp(`^\\s*0\\s+${base}\\s+65536$`, 'm'), 'container root is the server uid range');
  assert.match(inside.out, new RegExp(`inet ${ip.replace(/\./g, '\\.')}/24`));
  assert.match(inside.out, new RegExp(`default via ${env.rt.net.gateway.replace(/\./g, '\\.')} dev eth0`));
  assert.match(inside.out, /^0\s+65535$/m, 'the ping sysctl is applied in the kept namespace');
  assert.match(inside.out, /lo: <[^>]*\bUP\b/, 'loopback is up');
  assert.is((await run('runc', ['--root', env.rt.runc.root, 'state', id])).stdout.includes('"running"'), true, 'runc sees the fifo start as running');
  const log = await sh(env.rt, id, 'grep "starting /root/run.sh" /var/log/run.sh.log | tail -1');
  assert.match(log.out, /^\[supervisor \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d\] starting \/root\/run\.sh$/m, 'the supervisor time reads like date -Is');
});

test('namespaces half made or gone (a crash part-way, a host reboot) are made again at the next start', async () => {
  await env.rt.stop(id);
  const old = await pinned();
  await run('umount', [ns().net]); // as if a crash came between the two pins
  await env.rt.start(id);
  assert.is(await waitFor(() => httpGet(ip), 10_000), 'woke\n');
  const now = await pinned();
  assert.is.not(now.net, old.net, 'a new network namespace');
  assert.equal(await nsOfInit(), now);
  assert.ok(existsSync(`/sys/class/net/${veth()}`));
  // both pins gone and the veth too (a reboot): made again as well
  await env.rt.stop(id);
  await run('umount', [ns().net]);
  await run('umount', [ns().user]);
  await tryRun('ip', ['link', 'del', veth()]);
  await env.rt.start(id);
  assert.is(await waitFor(() => httpGet(ip), 10_000), 'woke\n');
  assert.equal(await nsOfInit(), await pinned());
});

test('a new runtime instance adopts a sleeping server with its namespaces, and delete releases them', async () => {
  await env.rt.stop(id);
  const kept = await pinned();
  const rt2 = await env.restart();
  assert.is(rt2.get(id)?.state, 'sleeping');
  assert.equal(await pinned(), kept, 'reconcile keeps the pinned namespaces');
  await rt2.start(id);
  assert.is(await waitFor(() => httpGet(ip), 10_000), 'woke\n');
  assert.equal(await nsOfInit(), kept);
  const dir = rt2.serverDir(id);
  await rt2.delete(id);
  assert.is(readFileSync('/proc/self/mountinfo', 'utf8').includes(dir), false, 'no pin left');
  assert.is(existsSync(`/sys/class/net/${veth()}`), false, 'no veth left');
});

test.run();
