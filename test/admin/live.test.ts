// The operator's commands against a real daemon with real containers: the real CLI (bin/rootbox,
// a separate process) talks to the daemon over <dataDir>/admin.sock and what it changes is seen
// at once by the host itself (runc, the server's cgroup) and by visitors (curl on the subdomain).
// Last, with the daemon stopped, the read-only commands answer from the store and the others refuse.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { rmSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { createLogger } from '../../src/log/index.js';
import { startDaemon, type Daemon } from '../../src/main.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { call, cgroupMemoryLimit, ensureBuilt, rootboxBin } from '../billing/api.js';
import { removeCgroup } from '../../src/runtime/cgroup.js';

const MiB = 1024 * 1024;
let d: TestDaemon;
let again: Daemon | undefined;
let stopped = false;

test.before(async () => {
  ensureBuilt();
  const pool = 26200 + (process.pid % 50) * 4;
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    hosting: { anonServersPerIp: 20, portPool: `${pool}-${pool + 3}`, rateLimit: { createsPerIpPerHour: 1000 } },
  });
});
test.after(async () => {
  if (!stopped) return d?.stop();
  again ??= await startDaemon(d.cfg, createLogger({ level: 'error', sink: () => {} }));
  for (const s of again.runtime.list()) {
    await again.hosting.core.exposures.releaseServer(s.id).catch(() => {});
    await again.runtime.delete(s.id).catch((e) => console.error('cleanup: delete failed', s.id, e));
  }
  await again.stop();
  await again.runtime.net.teardown().catch((e) => console.error('cleanup: network teardown failed', e));
  removeCgroup(`/${d.cfg.runtime.nftTable}`); // its servers' cgroup parent, when empty
  rmSync(d.dataDir, { recursive: true, force: true });
});

const cli = (...args: string[]) => run(rootboxBin, args, { env: { ...process.env, ROOTBOX_DATA_DIR: d.dataDir }, timeoutMs: 120_000 });
const json = async (...args: string[]) => {
  const r = await cli(...args, '--json');
  assert.is(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout);
};

async function create(): Promise<{ id: string; key: string; slug: string }> {
  const r = await call(d.http, 'POST', '/create');
  assert.is(r.status, 200, JSON.stringify(r.body));
  return { id: r.body.id, key: r.body.api_key, slug: r.body.subdomain.split('.')[0] };
}

/** What a visitor gets on the server's subdomain (curl, plain HTTP). */
async function visit(slug: string): Promise<{ status: number; body: string }> {
  const r = await run('curl', ['-sS', '-m', '30', '-H', `Host: ${slug}.localhost`, '-w', '\n%{http_code}', `http://127.0.0.1:${d.http}/`]);
  const i = r.stdout.lastIndexOf('\n');
  return { status: Number(r.stdout.slice(i + 1)), body: r.stdout.slice(0, i) };
}

/** runc's own view of the container (undefined once it is gone: a sleeping server has none). */
async function runcStatus(id: string): Promise<string | undefined> {
  const r = await run('runc', ['--root', join(d.dataDir, 'runc'), 'state', id]);
  return r.code === 0 ? JSON.parse(r.stdout).status : undefined;
}

test('servers list --json lists a new server running with its account, tier and ceilings; the table shows it too', async () => {
  const s = await create();
  const body = await json('servers', 'list');
  const mine = body.servers.find((x: { id: string }) => x.id === s.id);
  assert.ok(mine, JSON.stringify(body));
  assert.is(mine.state, 'running');
  assert.is(mine.state_from, 'daemon');
  assert.is(mine.tier, 'anonymous');
  assert.is(mine.memory_bytes, 256 * MiB);
  assert.is(mine.subdomain, `${s.slug}.localhost`);
  assert.is(mine.disk_image, join(d.dataDir, 'servers', s.id, 'disk.img'));
  assert.ok(mine.disk_allocated_bytes > 0);
  const table = await cli('servers', 'list');
  assert.is(table.code, 0, table.stderr);
  assert.match(table.stdout, /^ID\s+SUBDOMAIN\s+ACCOUNT/);
  assert.match(table.stdout, new RegExp(`${s.id}\\s+${s.slug}\\.localhost\\s+acc_\\w+\\s+anonymous\\s+running\\s+256 MiB`));
  const shown = await json('servers', 'show', `${s.slug}.localhost`);
  assert.is(shown.server.id, s.id);
  assert.is(shown.account.id, mine.account);
});

test("accounts credit raises a running server's cgroup memory limit at once", async () => {
  const s = await create();
  assert.is(cgroupMemoryLimit(d.cfg.runtime, s.id), 256 * MiB);
  const r = await cli('accounts', 'credit', s.id, '5');
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /tier paid/);
  assert.is(cgroupMemoryLimit(d.cfg.runtime, s.id), 4096 * MiB, 'raised live');
  assert.is(await runcStatus(s.id), 'running', 'without a restart');
  const acc = await json('accounts', 'show', s.id);
  assert.is(acc.account.tier, 'paid');
  assert.is(acc.account.balance_usd, 5);
  assert.ok(acc.ledger.some((e: { kind: string; usd: number }) => e.kind === 'credit' && e.usd === 5));
});

test('servers suspend stops the server and its subdomain answers 402; start is refused; resume brings it back', async () => {
  const s = await create();
  assert.is((await visit(s.slug)).status, 200);
  const r = await cli('servers', 'suspend', s.id);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /suspended/);
  assert.is(await runcStatus(s.id), undefined, 'no container left');
  assert.is(d.daemon.runtime.get(s.id)?.state, 'sleeping');
  const v = await visit(s.slug);
  assert.is(v.status, 402, v.body);
  const api = await call(d.http, 'GET', `/servers/${s.id}`, { key: s.key });
  assert.is(api.body.suspended, true);
  assert.is(api.body.flag, 'suspended_by_operator');
  const start = await cli('servers', 'start', s.id);
  assert.is(start.code, 1);
  assert.match(start.stderr, /suspended; resume it first/);
  assert.is(await runcStatus(s.id), undefined, 'a refused start starts nothing');

  const back = await json('servers', 'resume', s.id);
  assert.is(back.running, true);
  assert.is(back.server.state, 'running');
  assert.is(back.server.suspended, false);
  assert.is(await runcStatus(s.id), 'running');
  assert.is((await visit(s.slug)).status, 200);
  assert.is((await call(d.http, 'GET', `/servers/${s.id}`, { key: s.key })).body.flag, null);
});

test('a connection to an exposed port of a suspended server is closed and does not start it', async () => {
  const s = await create();
  const ex = await call(d.http, 'POST', '/expose', { key: s.key, body: { server: s.id, port: 8080 } });
  assert.is(ex.status, 200, JSON.stringify(ex.body));
  const port = Number(String(ex.body.public).split(':').pop());
  assert.is((await cli('servers', 'suspend', s.id)).code, 0);
  const closed = await new Promise<boolean>((resolve) => {
    const c = connect({ host: '127.0.0.1', port });
    c.on('error', () => {});
    c.on('close', () => resolve(true));
    setTimeout(() => resolve(false), 30_000).unref();
  });
  assert.ok(closed, 'the connection is closed');
  assert.is(await runcStatus(s.id), undefined, 'still stopped');
  assert.is(d.daemon.runtime.get(s.id)?.state, 'sleeping');
});

test('servers stop puts the server to sleep and servers start wakes it', async () => {
  const s = await create();
  const r = await json('servers', 'stop', s.id);
  assert.is(r.server.state, 'sleeping');
  // asleep and parked (runtime.parkOnSleep): only runc's init waits on exec.fifo, no process of the server runs
  assert.is(await runcStatus(s.id), 'created');
  assert.is((await call(d.http, 'GET', `/servers/${s.id}`, { key: s.key })).body.state, 'sleeping');
  const w = await json('servers', 'start', s.id);
  assert.is(w.server.state, 'running');
  assert.is(await runcStatus(s.id), 'running');
});

test('accounts rotate-key prints a key that works while the old one answers 401 revoked_api_key; revoke stops the key', async () => {
  const s = await create();
  const acc = d.daemon.store.servers.get(s.id)!.accountId;
  const r = await cli('accounts', 'rotate-key', acc);
  assert.is(r.code, 0, r.stderr);
  const key = /rbx_[0-9A-Za-z]{32}/.exec(r.stdout)?.[0];
  assert.ok(key, r.stdout);
  assert.is((await call(d.http, 'GET', '/credits', { key: s.key })).body.error, 'revoked_api_key');
  assert.is((await call(d.http, 'GET', '/credits', { key })).status, 200);
  const rv = await cli('accounts', 'revoke', acc);
  assert.is(rv.code, 0, rv.stderr);
  assert.not.match(rv.stdout, /rbx_/);
  assert.is((await call(d.http, 'GET', '/credits', { key })).body.error, 'revoked_api_key');
});

test('servers delete asks for --yes, then removes the server and its container', async () => {
  const s = await create();
  const no = await cli('servers', 'delete', s.id);
  assert.is(no.code, 2);
  assert.match(no.stderr, /--yes/);
  assert.is(await runcStatus(s.id), 'running');
  const r = await cli('servers', 'delete', s.id, '--yes');
  assert.is(r.code, 0, r.stderr);
  assert.is(d.daemon.store.servers.get(s.id), undefined);
  assert.is(await runcStatus(s.id), undefined);
  const gone = await cli('servers', 'show', s.id);
  assert.is(gone.code, 1);
  assert.match(gone.stderr, new RegExp(`no server ${s.id}`));
});

test("status --json shows the daemon's process.version, its parts, servers by state, host headroom, the certificate and what is configured", async () => {
  const st = await json('status');
  assert.is(st.daemon.running, true);
  assert.is(st.daemon.node, process.version);
  assert.is(st.daemon.pid, process.pid, 'the test daemon runs in this process');
  for (const p of ['store', 'runtime', 'billing', 'edge', 'ssh', 'admin']) assert.is(st.daemon.parts[p]?.up, true, p);
  assert.is(st.daemon.parts.edge.http_port, d.http);
  assert.is(st.servers.total, d.daemon.store.servers.all().length);
  assert.ok(st.servers.by_state.running >= 1, JSON.stringify(st.servers));
  assert.ok(st.host.memory.available_bytes > 0 && st.host.memory.available_bytes <= st.host.memory.total_bytes);
  assert.ok(st.host.disk.free_bytes > 0);
  assert.is(st.certificate.source, 'generated');
  assert.ok(st.certificate.days_left > 300, JSON.stringify(st.certificate));
  assert.is(st.config.payments.configured, false);
  // the parts list agrees: payments without payTo are not available
  assert.equal([st.daemon.parts.payments.configured, st.daemon.parts.payments.available], [false, false]);
  assert.match(st.daemon.parts.payments.problems, 'not configured (verify.x402.payTo)');
  assert.is(st.config.llm.configured, false);
  assert.is(st.store.schema_version, d.daemon.store.schemaVersion);
  const text = await cli('status');
  assert.match(text.stdout, new RegExp(`daemon: running, pid ${process.pid}, node ${process.version.replace(/\./g, '\\.')}`));
  assert.match(text.stdout, /payments \(settlement facilitator, configured false, available false, problems not configured \(verify\.x402\.payTo\)\)/);
  assert.match(text.stdout, /\npayments \(x402\): not configured \(verify\.x402\.payTo\)/);
  assert.not.match(text.stdout, /available true/);
});

test('with the daemon stopped, list, show and status read the store; commands that act on servers refuse', async () => {
  const s = await create();
  stopped = true;
  await d.daemon.stop(); // containers keep running, as in production
  const list = await cli('servers', 'list', '--json');
  assert.is(list.code, 0, list.stderr);
  assert.match(list.stderr, /daemon is not running/);
  const mine = JSON.parse(list.stdout).servers.find((x: { id: string }) => x.id === s.id);
  assert.is(mine.state, 'running');
  assert.is(mine.state_from, 'store');
  const show = await json('servers', 'show', s.id);
  assert.is(show.server.id, s.id);
  const accounts = await json('accounts', 'list');
  assert.ok(accounts.accounts.some((a: { id: string }) => a.id === mine.account));
  const st = await json('status');
  assert.is(st.daemon.running, false);
  assert.is(st.servers.total, list.stdout.match(/"id": "srv_/g)!.length);
  for (const args of [
    ['servers', 'suspend', s.id],
    ['servers', 'stop', s.id],
    ['accounts', 'rotate-key', mine.account],
  ]) {
    const r = await cli(...args);
    assert.is(r.code, 1, args.join(' '));
    assert.match(r.stderr, /no daemon answers on .*admin\.sock; `rootbox .*` acts on running servers/);
  }
  assert.is(await runcStatus(s.id), 'running', 'nothing was stopped');
});

test.run();
