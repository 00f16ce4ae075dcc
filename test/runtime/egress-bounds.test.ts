// Bounds on servers' outbound connections and the privacy of their files on the host, with real
// servers: one server sprays new UDP and TCP flows at a sink in a network namespace the test
// makes (a veth pair from the host, reached through the servers' NAT like any outside address);
// the host's connection table grows by at most that server's bound, the drops are counted (nft
// counter, metric, one line in the server's /var/log/rootbox.log) and a neighbour still connects.
// Outbound TCP 25 is refused while 587 connects. A host user (nobody) reaches no server's files.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { run, tryRun } from '../../src/runtime/proc.js';
import { appliedBounds, readDrops } from '../../src/runtime/netbounds.js';
import { FlowWatch, DROP_MARK } from '../../src/runtime/index.js';
import { registry } from '../../src/metrics/registry.js';
import { silentLogger } from '../../src/log/index.js';
import { MiB, newId, sh, startRuntime, waitFor, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const spray = newId('spray');
const near = newId('near');
const NS = 'rbt71-sink';
const SINK = '198.51.100.2';
let sink: ChildProcess | undefined;

const conntrack = () => Number(readFileSync('/proc/sys/net/netfilter/nf_conntrack_count', 'utf8'));
/** Entries of the host's connection table opened from `ip`. */
const entriesFrom = (ip: string) =>
  readFileSync('/proc/net/nf_conntrack', 'utf8')
    .split('\n')
    .filter((l) => l.includes(` src=${ip} `)).length;

async function closeSink(): Promise<void> {
  sink?.kill('SIGKILL');
  await tryRun('ip', ['netns', 'del', NS]); // takes the veth pair with it
  await tryRun('ip', ['link', 'del', 'rbt71o']);
}

/** A network namespace at 198.51.100.2 (reached from the host through a veth pair) whose
 *  listeners on TCP 80, 25 and 587 answer `ok` to every connection. */
async function openSink(): Promise<void> {
  await closeSink();
  await run('ip', ['netns', 'add', NS]);
  await run('ip', ['link', 'add', 'rbt71o', 'type', 'veth', 'peer', 'name', 'rbt71p', 'netns', NS]);
  await run('ip', ['-b', '-'], { input: 'addr add 198.51.100.1/30 dev rbt71o\nlink set rbt71o up\n' });
  await run('ip', ['-n', NS, '-b', '-'], { input: 'addr add 198.51.100.2/30 dev rbt71p\nlink set rbt71p up\nlink set lo up\n' });
  const app = `
import socket, threading, sys
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("${SINK}", port)); s.listen(4096)
    while True:
        c, _ = s.accept()
        try: c.sendall(b"ok\\n")
        except Exception: pass
        c.close()
for p in (80, 25, 587): threading.Thread(target=serve, args=(p,), daemon=True).start()
print("up", flush=True)
threading.Event().wait()
`;
  const child = spawn('ip', ['netns', 'exec', NS, 'python3', '-c', app], { stdio: ['ignore', 'pipe', 'inherit'] });
  sink = child;
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (c) => reject(new Error(`sink exited (${c})`)));
  });
}

/** `ok` when a TCP connection from inside server `id` to the sink's port got the sink's answer. */
const reach = async (id: string, port: number) =>
  (
    await sh(
      env.rt,
      id,
      `timeout 3 python3 -c 'import socket; s = socket.create_connection(("${SINK}", ${port}), 2); print(s.recv(3).decode().strip())' 2>&1 | tail -1`,
    )
  ).out.trim();

/** `udp` new UDP flows (distinct ports) and `tcp` new TCP connections from inside server `id`. */
const sprayFrom = (id: string, udp: number, tcp: number) =>
  sh(
    env.rt,
    id,
    `python3 - <<'EOF'
import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(${udp}):
    try: u.sendto(b"x", ("${SINK}", 1024 + i % 60000))
    except OSError: pass
open_ = []
for i in range(${tcp}):
    s = socket.socket(); s.setblocking(False)
    try: s.connect_ex(("${SINK}", 80))
    except OSError: pass
    open_.append(s)
    if len(open_) > 500: open_.pop(0).close()
print("sprayed")
EOF`,
  );

const dropsMetric = async () => {
  const m = (await registry.getSingleMetric('rootbox_egress_flows_dropped_total')?.get())?.values ?? [];
  return m.reduce((n, v) => n + v.value, 0);
};

/** A daemon restart. The sink is away meanwhile: a runtime starting blocks the host's directly
 *  connected subnets, and the sink's veth would be one. */
async function restart() {
  await closeSink();
  const rt = await env.restart();
  await openSink();
  return rt;
}

test.before(async () => {
  env = await startRuntime('egb', 71);
  await openSink();
  // the sprayer's bound on open connections is well under what it sprays, its rate well over
  await env.rt.create({ id: spray, slug: 'spray', memoryBytes: 128 * MiB, diskBytes: 160 * MiB, net: { flows: 500, newFlowsPerSecond: 100_000 } });
  await env.rt.create({ id: near, slug: 'near', memoryBytes: 128 * MiB, diskBytes: 160 * MiB });
});
test.after(async () => {
  await closeSink();
  await env?.cleanup();
});

test("a server spraying new flows holds at most its bound of the host's connection table, and its neighbour still connects", async () => {
  assert.is(await reach(near, 80), 'ok', 'the sink answers before the spray');
  const ip = env.rt.get(spray)!.ip;
  const before = conntrack();
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, conntrack())), 5);
  const r = await sprayFrom(spray, 20_000, 3_000).finally(() => clearInterval(sampler));
  const after = conntrack();
  const held = entriesFrom(ip);
  console.log(
    `nf_conntrack_count during a spray of 20000 UDP + 3000 TCP flows (bound 500): before ${before}, peak ${peak}, after ${after}; entries from the sprayer ${held}`,
  );
  assert.is(r.out.trim(), 'sprayed', r.err);
  assert.ok(held <= 520, `the sprayer holds ${held} entries`);
  // unbounded, the table grows by ~23000 entries; other tests on the host add some noise
  assert.ok(peak - before < 2500, `conntrack grew by ${peak - before}`);
  const drops = (await readDrops(env.cfg.runtime.nftTable)).get(env.rt.get(spray)!.ip);
  assert.ok(drops && drops.flows > 15_000, `drops counted: ${JSON.stringify(drops)}`);
  assert.is(await reach(near, 80), 'ok', 'the neighbour connects while the sprayer is at its bound');
  assert.is.not(await reach(spray, 80), 'ok', 'the sprayer itself opens nothing more');
});

test('a server over its rate loses its new connections, counted in the metric and told once per period in its rootbox.log', async () => {
  const watch = new FlowWatch({ servers: () => env.rt.list(), table: env.cfg.runtime.nftTable, logEvery: 60_000, log: silentLogger });
  await watch.tick(); // the drops so far are the daemon before's
  const m0 = await dropsMetric();
  const before = conntrack();
  const r = await sprayFrom(near, 20_000, 0); // the anonymous default: 100 new per second
  const held = entriesFrom(env.rt.get(near)!.ip);
  console.log(
    `nf_conntrack_count around a spray of 20000 UDP flows (anonymous defaults 1000 open, 100/s): before ${before}, after ${conntrack()}; entries from the sprayer ${held}`,
  );
  assert.is(r.out.trim(), 'sprayed', r.err);
  assert.ok(held < 1000, `the sprayer holds ${held} entries`);
  await watch.tick();
  const m1 = await dropsMetric();
  assert.ok(m1 - m0 > 15_000, `metric grew by ${m1 - m0}`);
  await sprayFrom(near, 1_000, 0);
  await watch.tick();
  assert.ok((await dropsMetric()) > m1, 'the metric counts every drop');
  const log = readFileSync(join(env.rt.get(near)!.rootfs, 'var/log/rootbox.log'), 'utf8');
  const lines = log.split('\n').filter((l) => l.includes(DROP_MARK));
  assert.is(lines.length, 1, log);
  assert.match(lines[0], /faster than 100 per second/);
});

test('a tier change gives a running server its new bounds at once, kept across a daemon restart', async () => {
  const t = env.cfg.runtime.nftTable;
  const ip = env.rt.get(near)!.ip;
  assert.equal(await appliedBounds(t, ip), { flows: 1000, newFlowsPerSecond: 100 });
  await env.rt.resize(near, { memoryBytes: 256 * MiB, diskBytes: 160 * MiB, net: { flows: 4000, newFlowsPerSecond: 400 } });
  assert.equal(await appliedBounds(t, ip), { flows: 4000, newFlowsPerSecond: 400 });
  assert.equal(env.rt.get(near)!.net, { flows: 4000, newFlowsPerSecond: 400 });
  await run('nft', ['delete', 'element', 'inet', t, 'bounds', `{ ${ip} }`]); // what a reboot loses
  await run('nft', ['delete', 'chain', 'inet', t, `nb_${ip.replace(/\./g, '_')}`]);
  const rt = await restart();
  assert.equal(await appliedBounds(t, ip), { flows: 4000, newFlowsPerSecond: 400 });
  assert.equal(rt.get(near)!.net, { flows: 4000, newFlowsPerSecond: 400 });
});

test('outbound TCP 25 is refused while 587 connects', async () => {
  assert.is(await reach(near, 587), 'ok');
  assert.match(await reach(near, 25), /refused/i);
});

test("host users other than the server's own reach none of its files, and an old open server dir is closed at start", async () => {
  const s = env.rt.get(near)!;
  assert.is((await sh(env.rt, near, 'echo secret > /srv/pub && chmod 644 /srv/pub && echo ok')).out.trim(), 'ok');
  const asNobody = (cmd: string) => tryRun('setpriv', ['--reuid=nobody', '--regid=nogroup', '--clear-groups', 'sh', '-c', cmd]);
  assert.ok(await asNobody('true'), 'setpriv works');
  assert.not.ok(await asNobody(`touch ${s.rootfs}/tmp/from-host`), 'nobody writes into /tmp');
  assert.not.ok(await asNobody(`cat ${s.rootfs}/srv/pub`), 'nobody reads a world-readable file');
  assert.not.ok(await asNobody(`ls ${join(s.rootfs, '..', 'disk', 'upper')}`), 'nobody lists the upper layer');
  assert.is(readFileSync(join(s.rootfs, 'srv/pub'), 'utf8'), 'secret\n', 'the daemon (root) still reads it');
  assert.not.ok(await asNobody(`ls ${join(env.dataDir, 'servers')}`), 'nobody lists the servers');
  const dir = join(s.rootfs, '..');
  assert.is(statSync(dir).mode & 0o7777, 0o710);
  assert.is(statSync(dir).gid, s.uidBase);
  // a server dir as an older daemon left it (0711) is closed again by the next start's reconcile
  chmodSync(dir, 0o711);
  assert.ok(await asNobody(`cat ${s.rootfs}/srv/pub`), 'the old mode let nobody read it');
  const rt = await restart();
  assert.is(statSync(dir).mode & 0o7777, 0o710);
  assert.not.ok(await asNobody(`cat ${s.rootfs}/srv/pub`));
  // and the server still sleeps, wakes and runs
  await rt.stop(near);
  await rt.start(near);
  assert.is((await sh(rt, near, 'cat /srv/pub')).out, 'secret\n');
  assert.ok(await waitFor(async () => (await reach(near, 587)) === 'ok', 5000), 'the woken server connects out');
});

test('deleting a server removes its bounds: map element, chain and counters', async () => {
  const t = env.cfg.runtime.nftTable;
  const ip = env.rt.get(spray)!.ip;
  const has = async () => {
    const all = (await run('nft', ['list', 'table', 'inet', t])).stdout;
    const tag = ip.replace(/\./g, '_');
    return [`nb_${tag}`, `nf_${tag}`, `nr_${tag}`, `${ip} : jump`].filter((n) => all.includes(n));
  };
  assert.equal(await has(), [`nb_${ip.replace(/\./g, '_')}`, `nf_${ip.replace(/\./g, '_')}`, `nr_${ip.replace(/\./g, '_')}`, `${ip} : jump`]);
  await env.rt.delete(spray);
  assert.equal(await has(), []);
});

test.run();
