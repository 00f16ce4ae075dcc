// Isolation between servers and from the host, with two real servers side by side: user
// namespace, seccomp, memory/disk/pids limits, and the network policy.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { cgroupDirs } from '../../src/runtime/cgroup.js';
import { httpGet, MiB, newId, RUN_SH, sh, startRuntime, waitFor, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const a = newId('a');
const b = newId('b');
let ipA = '';
let ipB = '';
let hostSvc: Server | undefined;
let hostPort = 0;

test.before(async () => {
  env = await startRuntime('iso', 12, { pidsLimit: 100 });
  ipA = (await env.rt.create({ id: a, slug: 'alpha', memoryBytes: 96 * MiB, diskBytes: 160 * MiB })).ip;
  ipB = (await env.rt.create({ id: b, slug: 'beta', memoryBytes: 96 * MiB, diskBytes: 160 * MiB })).ip;
  // B serves port 80 so "A cannot reach B" is not just "nothing listens"
  await sh(env.rt, b, 'mkdir -p /root/www && echo beta > /root/www/index.html && cat > /root/run.sh && chmod +x /root/run.sh', RUN_SH);
  hostSvc = createServer((s) => s.end('host-secret\n'));
  await new Promise<void>((r) => hostSvc!.listen(0, '0.0.0.0', () => r()));
  hostPort = (hostSvc.address() as { port: number }).port;
});
test.after(async () => {
  hostSvc?.close();
  await env?.cleanup();
});

/** Exit status of a TCP connect from inside server `id` (0 = connected). */
const connect = async (id: string, ip: string, port: number) =>
  (await sh(env.rt, id, `timeout 2 bash -c 'exec 3<>/dev/tcp/${ip}/${port}' 2>/dev/null; echo $?`)).out.trim();

test("root inside maps to the server's own unprivileged host uid, and ranges differ per server", async () => {
  const pid = (await env.rt.runc.state(a))!.pid;
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const uidBase = env.rt.get(a)!.uidBase;
  assert.match(status, new RegExp(`^Uid:\\s+${uidBase}\\s+${uidBase}\\s+${uidBase}\\s+${uidBase}$`, 'm'));
  assert.ok(uidBase >= 65536);
  assert.is.not(env.rt.get(b)!.uidBase, uidBase);
  assert.is((await sh(env.rt, a, 'id -u')).out, '0\n');
  assert.match(readFileSync(`/proc/${pid}/uid_map`, 'utf8'), new RegExp(`^\\s*0\\s+${uidBase}\\s+65536`));
});

test('unshare, mount and other namespace or kernel calls fail inside', async () => {
  const r = await sh(
    env.rt,
    a,
    `
    unshare -U true 2>/dev/null && echo unshare-U-ok
    unshare -n true 2>/dev/null && echo unshare-n-ok
    mkdir -p /mnt/x; mount -t tmpfs none /mnt/x 2>/dev/null && echo mount-ok
    mount --bind /root /mnt/x 2>/dev/null && echo bind-ok
    python3 -c 'import os; os.unshare(os.CLONE_NEWUSER)' 2>/dev/null && echo py-unshare-ok
    grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status
    grep CapEff /proc/self/status
    echo done`,
  );
  assert.is(r.out.includes('-ok'), false, r.out);
  assert.match(r.out, /NoNewPrivs:\s+1/);
  assert.match(r.out, /Seccomp:\s+2/);
  const capEff = BigInt('0x' + /CapEff:\s+([0-9a-f]+)/.exec(r.out)![1]);
  assert.is(capEff & (1n << 21n), 0n, 'no CAP_SYS_ADMIN');
  assert.is(capEff & (1n << 12n), 0n, 'no CAP_NET_ADMIN');
  assert.match(r.out, /done/);
});

test('a memory hog is OOM-killed inside its server while the server and its neighbour keep working', async () => {
  const hog = await sh(env.rt, a, `python3 -c 'x = bytearray(400 * 1024 * 1024); print(len(x))'; echo "exit=$?"`);
  assert.match(hog.out, /exit=137/);
  assert.is((await sh(env.rt, a, 'echo alive')).out, 'alive\n');
  assert.is((await sh(env.rt, b, 'echo alive')).out, 'alive\n');
  const st = await env.rt.stats(a);
  assert.ok(st.oomKills >= 1, `oom kills ${st.oomKills}`);
  assert.is((await env.rt.stats(b)).oomKills, 0);
});

test('filling the disk gives ENOSPC inside at the tier ceiling', async () => {
  const r = await sh(env.rt, a, 'dd if=/dev/zero of=/root/fill bs=1M count=400 2>&1; echo "exit=$?"; rm -f /root/fill');
  assert.match(r.out, /No space left on device/);
  assert.match(r.out, /exit=1/);
  const used = (await env.rt.stats(a)).diskUsedBytes;
  assert.ok(used < 160 * MiB, `used ${used}`);
  assert.is((await sh(env.rt, a, 'echo ok > /root/ok && cat /root/ok')).out, 'ok\n', 'usable again after rm');
});

test('a container reaches neither its neighbour, nor host services, nor link-local metadata; the host reaches it', async () => {
  assert.is(await waitFor(() => httpGet(ipB), 5000), 'beta\n', 'the host reaches B');
  assert.is(await connect(b, ipB, 80), '0', 'B reaches itself');
  assert.is.not(await connect(a, ipB, 80), '0', 'A must not reach B');
  assert.is((await sh(env.rt, a, `ping -c 1 -W 1 ${ipB} >/dev/null 2>&1; echo $?`)).out.trim() !== '0', true, 'no ping to B');
  const gw = env.rt.net.gateway;
  const hostIps = Object.values(networkInterfaces())
    .flat()
    .filter((x) => x && x.family === 'IPv4')
    .map((x) => x!.address);
  for (const ip of [gw, ...hostIps]) assert.is.not(await connect(a, ip, hostPort), '0', `A must not reach the host at ${ip}:${hostPort}`);
  assert.is.not(await connect(a, '169.254.169.254', 80), '0', 'no metadata service');
  assert.is.not(await connect(a, '10.0.0.1', 80), '0', 'no private ranges');
});

test('a fork bomb stops at the pids limit and the host stays responsive', async () => {
  const limit = env.cfg.runtime.pidsLimit;
  const bomb = env.rt.exec(a, { argv: ['/bin/bash', '-c', 'b() { b | b & }; b; sleep 5'] });
  bomb.stdin.end();
  await new Promise((r) => setTimeout(r, 2500));
  const pidsDir = cgroupDirs(env.rt.cgroup(a)).find((d) => d.includes('/pids/'))!;
  const current = Number(readFileSync(`${pidsDir}/pids.current`, 'utf8'));
  assert.ok(current <= limit, `pids.current ${current} <= ${limit}`);
  const events = readFileSync(`${pidsDir}/pids.events`, 'utf8');
  assert.ok(Number(events.split(' ')[1]) > 0, `the limit was hit (pids.current ${current}, events ${events})`);
  assert.is((await sh(env.rt, b, 'echo neighbour-fine')).out, 'neighbour-fine\n');
  await env.rt.stop(a); // SIGKILL to everything in the server ends the bomb
  bomb.kill('SIGKILL');
  const parked = await env.rt.runc.state(a); // parked (runtime.parkOnSleep): only the waiting init is left
  assert.is(parked?.status, 'created');
  assert.equal(readFileSync(`${pidsDir}/cgroup.procs`, 'utf8').trim().split('\n'), [String(parked!.pid)], 'nothing of the bomb is left');
  assert.ok(await env.rt.unpark(a));
  assert.is(cgroupDirs(env.rt.cgroup(a)).length, 0);
});

test.run();
