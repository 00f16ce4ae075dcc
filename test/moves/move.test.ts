// Moving one server between hosts (issue 38 item 1): two daemons on a real PostgreSQL registry
// with their checkpoints in a real S3 store (Ceph RGW, test/helpers/s3.ts), a real runc server
// on host-a running an app under run.sh. `rootbox servers move` (the operator command, through
// the admin socket) moves it asleep from A to B, then running from B back to A, while a client
// requests it through both edges: afterwards its page, its app, an SSH login (with the host key
// the client recorded before the move, StrictHostKeyChecking=yes), its files (sha256) and its api
// key are as before, the source no longer has its disk, and no request got another answer than
// the app's own. A move to a host that is down, or unknown, is refused and changes nothing.

import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import type { TestS3 } from '../helpers/s3.js';
import { until } from '../helpers/wait.js';
import { sh } from '../runtime/helpers/env.js';
import { get, type Got } from '../registry/fixtures/clients.js';
import { startS3Cluster, type S3Cluster } from '../registry/fixtures/s3cluster.js';
import { api } from '../registry/fixtures/twohosts.js';

const BLOB = randomBytes(100_000);
const APP_PY = `import socket, threading
BLOB = open("/root/blob", "rb").read()
def handle(c):
    try:
        buf = b""
        while b"\\r\\n\\r\\n" not in buf:
            d = c.recv(65536)
            if not d: return
            buf += d
        body = buf.split(b" ", 2)[1] + b"\\n" + BLOB
        c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/octet-stream\\r\\nConnection: close\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
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
const expected = (path: string) => Buffer.concat([Buffer.from(`${path}\n`), BLOB]);

let cl: S3Cluster;
let s3: TestS3;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let srv: { id: string; slug: string; host: string; key: string };
/** The server's own domain (made active on A as its order would leave it: A's record and routing, the registry's claim). */
let domain = '';
let keyFile = '';
let knownHosts = '';
let fileSha = '';
const work = mkdtempSync(join(tmpdir(), 'rbx-move-'));
const hosts = new Map<string, TestDaemon>();

const env = (d: TestDaemon) => ({ ...process.env, ROOTBOX_DATA_DIR: d.dataDir, ROOTBOX_REGISTRY: pg.url });
/** `rootbox servers move` on host `from`, its JSON answer (or its failure). */
const move = (from: TestDaemon, to: string) => adminCli(['servers', 'move', srv.id, '--to', to, '--json'], env(from));
const holder = () => [...hosts.values()].find((d) => d.daemon.store.servers.get(srv.id));
const inServer = async (script: string) => {
  const d = holder()!;
  const r = await sh(d.daemon.runtime, srv.id, script);
  assert.is(r.code, 0, `${script}: ${r.err}`);
  return r.out.trim();
};
/** SSH through host-a's SSH port, the host key checked against what the first login recorded. */
const ssh = (command: string) =>
  run(
    'ssh',
    [
      '-p',
      String(a.daemon.ssh.port),
      '-i',
      keyFile,
      '-o',
      'StrictHostKeyChecking=yes',
      '-o',
      `UserKnownHostsFile=${knownHosts}`,
      '-o',
      'IdentitiesOnly=yes',
      '-o',
      'BatchMode=yes',
      '-F',
      '/dev/null',
      'root@127.0.0.1',
      command,
    ],
    { timeoutMs: 60_000 },
  );

function exact(g: Got, path: string): void {
  assert.is(g.status, 200, `${path}: ${g.status} ${g.body.subarray(0, 200).toString()}`);
  assert.ok(g.body.equals(expected(path)), `${path}: the app's answer byte for byte (${g.body.length} bytes)`);
}

/** The app's answer through both edges, and the same files and account as before. */
async function sameServer(tag: string): Promise<void> {
  exact(await get(a, srv.host, `/${tag}-a`), `/${tag}-a`);
  exact(await get(b, srv.host, `/${tag}-b`), `/${tag}-b`);
  exact(await get(a, srv.host, `/${tag}-tls`, { tls: true }), `/${tag}-tls`);
  exact(await get(a, domain, `/${tag}-domain-a`), `/${tag}-domain-a`);
  exact(await get(b, domain, `/${tag}-domain-b`), `/${tag}-domain-b`);
  const owner = holder()!;
  for (const d of [a, b]) assert.is(d.daemon.hosting.core.domains.slugOf(domain), d === owner ? srv.slug : undefined, 'its domain routed by its owner only');
  assert.is(await inServer('sha256sum /root/data | cut -d" " -f1'), fileSha, 'the file written before the move');
  const login = await ssh('hostname; sha256sum /root/data | cut -d" " -f1');
  assert.is(login.code, 0, `ssh login with the recorded host key: ${login.stderr}`);
  assert.is(login.stdout, `${srv.slug}\n${fileSha}\n`);
  for (const d of [a, b]) {
    const v = await api(d, 'GET', `/servers/${srv.id}`, { key: srv.key });
    assert.is(v.status, 200, `its api key on ${d.cfg.cluster.host}: ${v.text}`);
    assert.is(v.json.id, srv.id);
  }
}

/** Requests through both edges every 50 ms while `during` runs (with `from`: from when that host
 *  holds the server's requests — before, a request would wake a sleeping server): every answer must be the app's. */
async function requestedDuring<T>(from: TestDaemon | undefined, during: () => Promise<T>): Promise<{ result: T; answers: Got[]; slowestMs: number }> {
  const answers: Got[] = [];
  const pending: Promise<void>[] = [];
  let stop = false;
  let n = 0;
  const seen = from?.logs.length ?? 0;
  const held = () => !from || from.logs.slice(seen).some((l) => l.msg === 'moving a server: its requests wait' && l.server === srv.id);
  const loop = (async () => {
    while (!stop && !held()) await new Promise((r) => setTimeout(r, 5));
    while (!stop) {
      const d = n % 2 ? a : b;
      const path = `/during-${n++}`;
      pending.push(
        get(d, srv.host, path).then(
          (g) => {
            exact(g, path);
            answers.push(g);
          },
          (e: Error) => assert.unreachable(`${path}: ${e.message}`),
        ),
      );
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  const result = await during();
  stop = true;
  await loop;
  await Promise.all(pending);
  return { result, answers, slowestMs: Math.max(...answers.map((g) => g.ms)) };
}

test.before(async () => {
  const settings = { proxy: { idleTimeout: 600_000, wakeTimeout: '30s' } };
  cl = await startS3Cluster(['host-a', 'host-b'], settings);
  ({ s3, pg } = cl);
  a = cl.daemon('host-a');
  b = cl.daemon('host-b');
  hosts.set('host-a', a).set('host-b', b);
  const slug = `mv${randomBytes(3).toString('hex')}`;
  const r = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  srv = { id: r.json.id, slug, host: `${slug}.localhost`, key: r.json.api_key };
  keyFile = join(work, 'key');
  knownHosts = join(work, 'known_hosts');
  writeFileSync(keyFile, r.json.ssh_private_key, { mode: 0o600 });
  const w = await sh(
    a.daemon.runtime,
    srv.id,
    `cat > /root/blob && cat > /root/app.py <<'EOF'\n${APP_PY}EOF\ncat > /root/run.sh <<'EOF'\n${RUN_SH}EOF\nchmod +x /root/run.sh && head -c 20000000 /dev/urandom > /root/data && sync`,
    BLOB,
  );
  assert.is(w.code, 0, w.err);
  fileSha = await inServer('sha256sum /root/data | cut -d" " -f1');
  await until('the app answers on A', async () => ((await get(a, srv.host, '/up')).body.equals(expected('/up')) ? true : undefined), 30_000, 100);
  domain = `www.${slug}.example`;
  const accountId = a.daemon.store.servers.get(srv.id)!.accountId;
  assert.ok(await a.daemon.registry!.shared.claimDomain({ domain, serverId: srv.id, accountId, state: 'active' }));
  const at = Date.now();
  a.daemon.store.domains.claim({ domain, serverId: srv.id, accountId, token: 'test', state: 'active', createdAt: at, activeAt: at }, () => true);
  a.daemon.hosting.core.domains.load();
  await until('B routes the domain', async () => ((await get(b, domain, '/dom')).status === 200 ? true : undefined), 20_000, 100);
  exact(await get(a, domain, '/dom-a'), '/dom-a');
  // the first login records host-a's SSH host key; every later one is checked against it
  const first = await run('ssh', [
    '-p',
    String(a.daemon.ssh.port),
    '-i',
    keyFile,
    '-o',
    'StrictHostKeyChecking=accept-new',
    '-o',
    `UserKnownHostsFile=${knownHosts}`,
    '-o',
    'IdentitiesOnly=yes',
    '-o',
    'BatchMode=yes',
    '-F',
    '/dev/null',
    'root@127.0.0.1',
    'true',
  ]);
  assert.is(first.code, 0, first.stderr);
  assert.ok(existsSync(knownHosts));
});

test.after(async () => {
  try {
    await cl?.stop();
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test('a sleeping server moves from A to B: one checkpoint, a restore there, the epoch up, A without its disk', async () => {
  const stop = await adminCli(['servers', 'stop', srv.id], env(a));
  assert.is(stop.code, 0, stop.stderr);
  await until('asleep on A', () => a.daemon.runtime.get(srv.id)?.state === 'sleeping', 30_000, 50);
  const serverDir = join(a.dataDir, 'servers', srv.id);
  const before = await pg.sql(`SELECT epoch FROM placements WHERE server_id = '${srv.id}'`);
  const { result, answers } = await requestedDuring(a, () => move(a, 'host-b'));
  assert.is(result.code, 0, result.stderr + result.stdout);
  const report = JSON.parse(result.stdout).move;
  assert.is(report.from, 'host-a');
  assert.is(report.to, 'host-b');
  assert.is(report.was, 'sleeping');
  assert.ok(report.epoch > Number(before.trim()), `epoch ${report.epoch} after ${before.trim()}`);
  console.log(
    `  sleeping move: requests waited ${report.held_ms} ms (${JSON.stringify(report.held_phases_ms)}), the move took ${report.took_ms} ms; ${answers.length} requests during it, all exact`,
  );
  assert.is(a.daemon.store.servers.get(srv.id), undefined, "A's store no longer has it");
  assert.is(a.daemon.runtime.get(srv.id), undefined, "A's runtime no longer has it");
  assert.not.ok(existsSync(serverDir), "A's disk of it is gone");
  assert.ok(b.daemon.store.servers.get(srv.id), "B's store has it");
  assert.is((await pg.sql(`SELECT host FROM placements WHERE server_id = '${srv.id}'`)).trim(), 'host-b');
  // nothing wrote its disk since it was made from its checkpoint: B's automatic checkpoints leave it
  const had = b.daemon.store.checkpoints.list(srv.id).map((c) => c.id);
  assert.ok(had.length > 0, 'its checkpoint records moved with it');
  await b.daemon.hosting.core.autoCheckpoints!.tick();
  assert.equal(
    b.daemon.store.checkpoints.list(srv.id).map((c) => c.id),
    had,
    'a moved sleeping server whose disk nothing wrote is not checkpointed again',
  );
  await sameServer('after-sleeping-move');
  const list = await adminCli(['servers', 'list', '--cluster', '--json'], env(a));
  assert.is(list.code, 0, list.stderr);
  const placed = (JSON.parse(list.stdout).placements as { server_id: string; host: string }[]).find((p) => p.server_id === srv.id);
  assert.is(placed?.host, 'host-b', list.stdout);
});

test('a running server with an exposed port moves from B back to A: the app comes back, a new public port, every request answered by the app', async () => {
  const exp = await api(b, 'POST', '/expose', { key: srv.key, body: { server: srv.id, port: 80 } });
  assert.is(exp.status, 200, exp.text);
  await until('running on B', () => b.daemon.runtime.get(srv.id)?.state === 'running', 30_000, 50);
  exact(await get(b, srv.host, '/warm'), '/warm');
  const { result, answers, slowestMs } = await requestedDuring(undefined, () => move(b, 'host-a'));
  assert.is(result.code, 0, result.stderr + result.stdout);
  const report = JSON.parse(result.stdout).move;
  assert.is(report.was, 'running');
  console.log(
    `  running move: unavailable (requests held) ${report.held_ms} ms (${JSON.stringify(report.held_phases_ms)}), the move took ${report.took_ms} ms; ${answers.length} requests during it, all exact, the slowest ${Math.round(slowestMs)} ms`,
  );
  assert.is(b.daemon.store.servers.get(srv.id), undefined);
  assert.is(b.daemon.runtime.get(srv.id), undefined);
  assert.not.ok(existsSync(join(b.dataDir, 'servers', srv.id)), "B's disk of it is gone");
  assert.is(a.daemon.runtime.get(srv.id)?.state, 'running', 'running on A');
  // the exposed port: another public port, A's, which reaches the app
  const v = await api(b, 'GET', `/servers/${srv.id}`, { key: srv.key });
  assert.is(v.status, 200, v.text);
  const ports = v.json.exposed_ports as { public: string; container_port: number }[];
  assert.is(ports.length, 1, JSON.stringify(ports));
  assert.is(ports[0].container_port, 80);
  assert.equal(report.exposed_ports, ports);
  const port = Number(ports[0].public.split(':').pop());
  const direct = Buffer.from(await (await fetch(`http://127.0.0.1:${port}/direct`)).arrayBuffer());
  assert.ok(direct.equals(expected('/direct')), 'the new public port reaches the app');
  await sameServer('after-running-move');
});

test('the store unreachable: a move of the running server, then of the sleeping one, fails and it stays on A, serving', async () => {
  const placed = async () => (await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${srv.id}'`)).trim();
  const before = await placed();
  await s3.killRgw();
  try {
    const running = await move(a, 'host-b');
    assert.is(running.code, 1, running.stdout);
    assert.match(running.stderr, /store/);
    assert.is(a.daemon.runtime.get(srv.id)?.state, 'running', 'it ran on throughout');
    exact(await get(b, srv.host, '/store-down-running'), '/store-down-running');
    const stop = await adminCli(['servers', 'stop', srv.id], env(a));
    assert.is(stop.code, 0, stop.stderr);
    const sleeping = await move(a, 'host-b');
    assert.is(sleeping.code, 1, sleeping.stdout);
    assert.match(sleeping.stderr, /store/);
  } finally {
    await s3.startRgw();
  }
  assert.is(await placed(), before, 'the placement did not change');
  assert.is(b.daemon.store.servers.getAny(srv.id), undefined, 'B has nothing of it');
  // woken on A by a request through B
  exact(await get(b, srv.host, '/store-down-sleeping'), '/store-down-sleeping');
  assert.is(a.daemon.runtime.get(srv.id)?.state, 'running');
});

test("the registry unreachable mid-move (halted once A holds the running server's requests): the move fails, the server runs on A again and serves", async () => {
  const placed = async () => (await pg.sql(`SELECT host FROM placements WHERE server_id = '${srv.id}'`)).trim();
  assert.is(a.daemon.runtime.get(srv.id)?.state, 'running');
  const seen = a.logs.length;
  const moving = move(a, 'host-b');
  await until('A holds the requests', () => a.logs.slice(seen).some((l) => l.msg === 'moving a server: its requests wait' && l.server === srv.id), 60_000, 5);
  await pg.halt();
  let r: Awaited<typeof moving>;
  try {
    r = await moving;
  } finally {
    await pg.start();
  }
  assert.is(r.code, 1, r.stdout);
  console.log(`  registry halted mid-move: ${r.stderr.trim()}`);
  await until('A runs it again', () => a.daemon.runtime.get(srv.id)?.state === 'running', 30_000, 50);
  assert.ok(a.daemon.store.servers.get(srv.id), 'A keeps it');
  assert.is(b.daemon.store.servers.getAny(srv.id), undefined, 'B has nothing of it');
  exact(await get(a, srv.host, '/registry-down'), '/registry-down');
  await until('the registry answers again', async () => (await placed().catch(() => '')) !== '', 30_000, 200);
  assert.is(await placed(), 'host-a');
  exact(await get(b, srv.host, '/registry-back'), '/registry-back');
});

test('a move to a host that is down, or that the cluster does not have, is refused and changes nothing', async () => {
  const epoch = (await pg.sql(`SELECT epoch FROM placements WHERE server_id = '${srv.id}'`)).trim();
  const unknown = await move(a, 'host-nowhere');
  assert.is(unknown.code, 1, unknown.stdout);
  assert.match(unknown.stderr, /no host host-nowhere/);
  await b.stop();
  await until('A sees B down', () => a.daemon.registry!.placements.host('host-b')?.up === false, 30_000, 200);
  const down = await move(a, 'host-b');
  assert.is(down.code, 1, down.stdout);
  assert.match(down.stderr, /host-b is down/);
  assert.is((await pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${srv.id}'`)).trim(), `host-a ${epoch}`);
  assert.is(a.daemon.runtime.get(srv.id)?.state, 'running');
  exact(await get(a, srv.host, '/after-refusal'), '/after-refusal');
});

test.run();
