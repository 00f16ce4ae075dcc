// The TypeScript SDK (sdk/js) against a real daemon with real runc servers: an anonymous create
// that keeps the returned key, exec (exit code, output streamed as it comes, timeout, stdin, cwd
// and env), a 20 MB binary file written and read back byte-exact, listing, tar download and
// upload, the server's page fetched at url(), exposed ports, logs, restart, checkpoint → change →
// restore, fork (an independent server), deleteCheckpoint, the typed errors of a
// wrong key, a missing server and a used-up grant (402 with the recharge URL), delete; and the
// README's quick start, run as printed (built package, HTTPS with the daemon's CA).

import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PaymentRequiredError, Rootbox, RootboxError, type Server } from '../../sdk/js/src/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

const repo = new URL('../../', import.meta.url).pathname;
const HOUR = 3_600_000;
let d: TestDaemon;
let rb: Rootbox;
let server: Server;
const work = mkdtempSync(join(tmpdir(), 'rbx-sdkjs-'));
const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

test.before(async () => {
  d = await startTestDaemon({ billing: { grantRamGbHours: 0.001, meterInterval: '1h' }, hosting: { rateLimit: { createsPerIpPerHour: 1000 } } });
  if (!d.containers) throw new Error('this file needs the runc runtime');
  rb = new Rootbox({ baseUrl: `http://api.localhost:${d.http}` });
});
test.after(async () => {
  rb?.close();
  await d?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** A thrown RootboxError, checked to be one. */
async function rejects(p: Promise<unknown>): Promise<RootboxError> {
  try {
    await p;
  } catch (e) {
    assert.instance(e, RootboxError);
    return e as RootboxError;
  }
  throw new Error('expected a RootboxError');
}

test('create without a key makes an anonymous account whose key the client keeps', async () => {
  assert.is(rb.apiKey, undefined);
  server = await rb.create({ slug: 'sdk-js' });
  assert.match(server.id, /^srv_/);
  assert.match(rb.apiKey ?? '', /^rbx_/);
  assert.is(server.subdomain, 'sdk-js.localhost');
  assert.is(server.info?.state, 'running');
  assert.is(server.info?.credits.tier, 'anonymous');
  assert.match(server.sshCommand(), /^ssh -i ~\/\.ssh\/srv_\w+ root@\S+ -p \d+$/);
  assert.match(server.sshPrivateKey ?? '', /^-----BEGIN OPENSSH PRIVATE KEY-----/);
  const listed = await rb.servers.list();
  assert.equal(
    listed.map((s) => s.id),
    [server.id],
  );
  const got = await rb.servers.get(server.id);
  assert.is(got.info?.subdomain, 'sdk-js.localhost');
  assert.is(got.info?.exposedPorts.length, 0);
  // a server handle by id reads it on refresh
  const handle = rb.server(server.id);
  assert.is((await handle.refresh()).id, server.id);
});

test('exec: exit code, stdout and stderr, cwd, env, argv, stdin', async () => {
  const r = await server.exec('echo out; echo err >&2; exit 3');
  assert.equal({ ...r, ms: 0 }, { exitCode: 3, signal: null, stdout: 'out\n', stderr: 'err\n', truncated: false, timedOut: false, ms: 0 });
  const e = await server.exec('pwd; echo "$FOO"', { cwd: '/tmp', env: { FOO: 'bar baz' } });
  assert.is(e.stdout, '/tmp\nbar baz\n');
  assert.is((await server.exec(['printf', '%s|', 'a b', 'c'])).stdout, 'a b|c|');
  assert.is((await server.exec('tr a-z A-Z', { stdin: 'hello stdin' })).stdout, 'HELLO STDIN');
});

test('exec streams output as it comes (NDJSON), stdin included, and keeps it whole', async () => {
  const seen: { data: string; at: number }[] = [];
  const errs: string[] = [];
  const started = Date.now();
  const r = await server.exec('read x; echo "got $x"; sleep 1.5; echo late; echo oops >&2', {
    stdin: 'in\n',
    onStdout: (data) => seen.push({ data, at: Date.now() }),
    onStderr: (data) => errs.push(data),
  });
  const ended = Date.now();
  assert.is(r.exitCode, 0);
  assert.is(r.stdout, 'got in\nlate\n');
  assert.is(r.stderr, 'oops\n');
  assert.is(seen.map((s) => s.data).join(''), r.stdout);
  assert.is(errs.join(''), 'oops\n');
  // the first line came before the command slept: well before the call ended
  assert.ok(seen[0].data.startsWith('got in'), JSON.stringify(seen));
  assert.ok(ended - seen[0].at >= 1000, `first chunk ${seen[0].at - started} ms in, the call ended at ${ended - started} ms`);
});

test('exec timeout kills the command and says so', async () => {
  const t0 = Date.now();
  const r = await server.exec('echo start; sleep 30', { timeout: 1 });
  assert.ok(Date.now() - t0 < 15_000, `${Date.now() - t0} ms`);
  assert.is(r.timedOut, true);
  assert.is(r.stdout, 'start\n');
  assert.ok(r.exitCode === null || r.exitCode !== 0, JSON.stringify(r));
  const s = await server.exec('echo start; sleep 30', { timeout: 1, onStdout: () => {} });
  assert.is(s.timedOut, true);
  assert.is(s.stdout, 'start\n');
});

test("exec's signal: aborting a call ends it at once, and the API kills the command (streamed or not)", async () => {
  const running = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 62' || true";
  for (const stream of [true, false]) {
    const ac = new AbortController();
    const call = server.exec('sleep 62', { signal: ac.signal, onStdout: stream ? () => {} : undefined });
    const result = call.then(
      () => undefined,
      (e: Error) => e,
    );
    assert.ok(await waitFor(async () => (await server.exec(running)).stdout.trim() === '1'), `stream ${stream}: the command did not start`);
    const t0 = Date.now();
    ac.abort();
    const e = await result;
    assert.is(e?.name, 'AbortError', `stream ${stream}: ${String(e)}`);
    assert.ok(Date.now() - t0 < 2000, `${Date.now() - t0} ms`);
    assert.ok(await waitFor(async () => (await server.exec(running)).stdout.trim() === '0'), `stream ${stream}: the command still runs`);
  }
});

/** Polls `ok` every 200 ms for up to 10 s. */
async function waitFor(ok: () => Promise<boolean>): Promise<boolean> {
  for (let i = 0; i < 50; i++) {
    if (await ok()) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

test('files: a 20 MB binary file round trip byte-exact; list, tar download and upload, remove', async () => {
  const data = randomBytes(20 * 1024 * 1024);
  const w = await server.files.write('/root/data/blob.bin', data, { mode: '600' });
  assert.equal(w, { path: '/root/data/blob.bin', size: data.length });
  const back = await server.files.read('/root/data/blob.bin');
  assert.is(back.length, data.length);
  assert.is(sha(back), sha(data));
  assert.is((await server.exec('sha256sum /root/data/blob.bin')).stdout.split(' ')[0], sha(data));
  await server.files.write('/root/data/note.txt', 'a note\n');
  const list = await server.files.list('/root/data');
  const byName = Object.fromEntries(list.entries.map((e) => [e.name, e]));
  assert.is(byName['blob.bin'].size, data.length);
  assert.is(byName['blob.bin'].mode, '600');
  assert.is(byName['note.txt'].type, 'file');
  assert.is(list.truncated, false);
  const tgz = await server.files.download('/root/data', { gzip: true });
  assert.is(Buffer.from(tgz.subarray(0, 2)).toString('hex'), '1f8b');
  await server.files.upload('/root/copy', tgz);
  assert.is(sha(await server.files.read('/root/copy/blob.bin')), sha(data));
  assert.is(Buffer.from(await server.files.read('/root/copy/note.txt')).toString(), 'a note\n');
  await server.files.remove('/root/copy');
  const gone = await rejects(server.files.read('/root/copy/note.txt'));
  assert.is(gone.status, 404);
  assert.is(gone.code, 'file_not_found');
});

test("url() is the server's page: /root/www served at its subdomain", async () => {
  await server.files.write('/root/www/index.html', '<h1>from the sdk</h1>\n');
  const url = server.url('/');
  assert.is(url, `http://sdk-js.localhost:${d.http}/`);
  const r = await fetch(url);
  assert.is(r.status, 200);
  assert.is(await r.text(), '<h1>from the sdk</h1>\n');
});

test('expose, logs, restart, credits', async () => {
  const p = await server.expose(8000);
  assert.is(p.containerPort, 8000);
  assert.is(p.protocol, 'tcp');
  assert.match(p.public, /:\d+$/);
  assert.equal((await server.refresh()).exposedPorts, [p]);
  await server.unexpose(8000);
  assert.equal((await server.refresh()).exposedPorts, []);
  const logs = await server.logs({ tail: 10 });
  assert.ok(Array.isArray(logs.lines) && Array.isArray(logs.events) && typeof logs.oomKills === 'number', JSON.stringify(logs));
  const restarted = await server.restart();
  assert.is(restarted.state, 'running');
  assert.is((await server.exec('echo back')).stdout, 'back\n');
  assert.is((await rb.credits()).tier, 'anonymous');
});

test('spawn: over the exec WebSocket stdin stays open, output comes as it is written, kill() ends the command', async () => {
  const got: string[] = [];
  let answered: () => void = () => {};
  const first = new Promise<void>((r) => (answered = r));
  const p = await server.spawn('while read l; do echo "got $l"; done; echo bye >&2', {
    onStdout: (s) => (got.push(s), answered()),
  });
  await p.write('one\n');
  await first; // answered while stdin is still open
  assert.is(got.join(''), 'got one\n');
  await p.write(Buffer.from('two\n'));
  await p.end();
  const r = await p.wait();
  assert.equal({ ...r, ms: 0 }, { exitCode: 0, signal: null, stdout: 'got one\ngot two\n', stderr: 'bye\n', truncated: false, timedOut: false, ms: 0 });
  // kill() closes the socket: the command is gone from the server
  const k = await server.spawn('sleep 61');
  const running = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 61' || true";
  assert.ok(await waitFor(async () => (await server.exec(running)).stdout.trim() === '1'), 'the command did not start');
  k.kill();
  const e = await rejects(k.wait());
  assert.is(e.code, 'connection_failed');
  assert.ok(await waitFor(async () => (await server.exec(running)).stdout.trim() === '0'), 'the killed command still runs');
  // a refusal before the upgrade is the API's typed error
  const wrong = new Rootbox({ baseUrl: `http://api.localhost:${d.http}`, apiKey: `rbx_${'0'.repeat(40)}` });
  const w = await rejects(wrong.server(server.id).spawn('true'));
  wrong.close();
  assert.is(w.status, 401);
  assert.is(w.code, 'invalid_api_key');
});

test('checkpoint → change a file → restore brings it back; fork is an independent server with its own key pair; deleteCheckpoint', async () => {
  await server.files.write('/root/ck.txt', 'before\n');
  const cp = await server.checkpoint({ comment: 'sdk js' });
  assert.match(cp.id, /^ckp_/);
  assert.is(cp.serverId, server.id);
  assert.is(cp.kind, 'manual');
  assert.is(cp.comment, 'sdk js');
  assert.ok(cp.sizeBytes > 0);
  assert.ok(Date.parse(cp.createdAt) > 0);
  await server.files.write('/root/ck.txt', 'after\n');
  await server.files.write('/root/new.txt', 'made after\n');
  const restored = await server.restore(cp.id);
  assert.is(restored.id, cp.id);
  assert.is(Buffer.from(await server.files.read('/root/ck.txt')).toString(), 'before\n');
  assert.is((await server.exec('test -e /root/new.txt')).exitCode, 1);
  // a second checkpoint lists first
  const cp2 = await server.checkpoint();
  assert.is(cp2.comment, undefined);
  assert.equal(
    (await server.checkpoints()).map((c) => c.id),
    [cp2.id, cp.id],
  );
  // fork: a new server from the first checkpoint, with its own id, subdomain and SSH key
  const fork = await server.fork({ checkpoint: cp.id, slug: 'sdk-js-fork' });
  try {
    assert.match(fork.id, /^srv_/);
    assert.is.not(fork.id, server.id);
    assert.is(fork.subdomain, 'sdk-js-fork.localhost');
    assert.match(fork.sshCommand(), new RegExp(`^ssh -i ~/\\.ssh/${fork.id} `));
    assert.match(fork.sshPrivateKey ?? '', /^-----BEGIN OPENSSH PRIVATE KEY-----/);
    assert.is.not(fork.sshPrivateKey, server.sshPrivateKey);
    assert.is(Buffer.from(await fork.files.read('/root/ck.txt')).toString(), 'before\n');
    // independent both ways
    await fork.files.write('/root/ck.txt', 'fork\n');
    await server.files.write('/root/ck.txt', 'source\n');
    assert.is(Buffer.from(await fork.files.read('/root/ck.txt')).toString(), 'fork\n');
    assert.is(Buffer.from(await server.files.read('/root/ck.txt')).toString(), 'source\n');
    assert.equal(await fork.checkpoints(), []);
  } finally {
    await fork.delete();
  }
  await server.deleteCheckpoint(cp2.id);
  assert.equal(
    (await server.checkpoints()).map((c) => c.id),
    [cp.id],
  );
  const gone = await rejects(server.restore(cp2.id));
  assert.is(gone.status, 404);
  assert.is(gone.code, 'checkpoint_not_found');
});

test('a wrong key and a missing server are typed errors with the API code', async () => {
  const wrong = new Rootbox({ baseUrl: `http://api.localhost:${d.http}`, apiKey: `rbx_${'0'.repeat(40)}` });
  const e = await rejects(wrong.servers.list());
  wrong.close();
  assert.is(e.status, 401);
  assert.ok(['invalid_api_key', 'missing_api_key'].includes(e.code), e.code);
  assert.ok(e.detail.length > 0);
  const nf = await rejects(rb.servers.get('srv_0000000000000000'));
  assert.is(nf.status, 404);
  assert.is(nf.code, 'server_not_found');
});

test('rotateKey: the client goes on with the new key; the old one is refused', async () => {
  const old = rb.apiKey;
  const k = await rb.rotateKey();
  assert.match(k.apiKey, /^rbx_/);
  assert.is(k.tier, 'anonymous');
  assert.is(rb.apiKey, k.apiKey);
  assert.is((await rb.servers.list()).length, 1);
  const stale = new Rootbox({ baseUrl: `http://api.localhost:${d.http}`, apiKey: old });
  const e = await rejects(stale.servers.list());
  stale.close();
  assert.is(e.status, 401);
  assert.is(e.code, 'revoked_api_key');
});

test("the README's quick start runs as printed (the built package, over HTTPS with the daemon's CA)", async () => {
  const readme = readFileSync(join(repo, 'sdk/js/README.md'), 'utf8');
  const m = /## Quick start\n\n```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(m, 'no quick start');
  assert.is(m[1].trim().split('\n').length, 5, 'five lines');
  // the package as npm would install it: its package.json and README beside a fresh build
  const pkg = join(work, 'qs', 'node_modules', 'rootbox');
  mkdirSync(pkg, { recursive: true });
  for (const f of ['package.json', 'README.md']) copyFileSync(join(repo, 'sdk/js', f), join(pkg, f));
  const b = spawnSync(process.execPath, [join(repo, 'sdk/js/build.mjs'), '--outdir', join(pkg, 'dist')], { encoding: 'utf8' });
  assert.is(b.status, 0, b.stderr);
  assert.ok(existsSync(join(pkg, 'dist', 'index.d.ts')), 'the types were built');
  writeFileSync(join(work, 'qs', 'quick.mjs'), m[1].replaceAll(':8443', `:${d.https}`));
  writeFileSync(join(work, 'ca.pem'), d.ca);
  const r = await new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
    const p = spawn(process.execPath, ['quick.mjs'], { cwd: join(work, 'qs'), env: { PATH: process.env.PATH, NODE_EXTRA_CA_CERTS: join(work, 'ca.pem') } });
    let out = '';
    let err = '';
    p.stdout.on('data', (c) => (out += c));
    p.stderr.on('data', (c) => (err += c));
    p.on('close', (code) => resolve({ code, out, err }));
  });
  assert.is(r.code, 0, r.err);
  assert.match(r.out, /^Linux /);
  // it made its own anonymous account and deleted its server
  assert.is(d.daemon.store.servers.all().filter((s) => s.id !== server.id).length, 0);
});

test('a used-up grant is a PaymentRequiredError with the recharge URL; delete still works', async () => {
  let clock = Date.now() + HOUR;
  await d.daemon.billing.tick((clock += HOUR));
  await d.daemon.billing.tick((clock += 3 * HOUR));
  const e = await rejects(server.exec('true'));
  assert.instance(e, PaymentRequiredError);
  assert.is(e.status, 402);
  assert.is(e.code, 'free_tier_exceeded');
  assert.is((e as PaymentRequiredError).rechargeUrl, `http://api.localhost:${d.http}/account/recharge`);
  await server.delete();
  const gone = await rejects(rb.servers.get(server.id));
  assert.is(gone.code, 'server_not_found');
  assert.is(d.daemon.runtime.list().length, 0);
});

test.run();
