// The installed layout, run as systemd would run it: the real `bin/rootbox install` into a scratch
// root (prefix, etc, data dir, unit dir under one temp dir), `systemd-analyze verify` on the unit
// it wrote, then the unit's ExecStart started with the unit's Environment/EnvironmentFile and
// WorkingDirectory and systemd's default PATH, a server created through the API and its subdomain
// served. Also: a data dir under a 0700 parent is refused by doctor and serve with the chmod.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../helpers/run.js';
import { call, ensureBuilt, rootboxBin } from '../billing/api.js';

const checkout = new URL('../../', import.meta.url).pathname;
const root = mkdtempSync(join(tmpdir(), 'rbx-install-'));
chmodSync(root, 0o755); // the servers' uids must traverse it (the 0700 case is the last test)
const prefix = join(root, 'opt');
const etc = join(root, 'etc');
const data = join(root, 'data');
const unitDir = join(root, 'unit');
const unitFile = join(unitDir, 'rootbox.service');
const n = 100 + (process.pid % 150);
const net = { bridge: `rbi${n}`, nftTable: `rbi${n}` };
let daemon: ChildProcess | undefined;
let exited: Promise<unknown> | undefined;
const servers: string[] = [];

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });

/** The [Service] settings of a unit file, each key's values in order (as systemd reads them). */
function service(text: string): Map<string, string[]> {
  const m = new Map<string, string[]>();
  let section = '';
  for (const raw of text.split('\n')) {
    const l = raw.trim();
    if (!l || l.startsWith('#') || l.startsWith(';')) continue;
    if (l.startsWith('[')) section = l;
    else if (section === '[Service]') {
      const i = l.indexOf('=');
      m.set(l.slice(0, i), [...(m.get(l.slice(0, i)) ?? []), l.slice(i + 1)]);
    }
  }
  return m;
}

test.before(() => ensureBuilt());

test.after(async () => {
  const cli = (...a: string[]) => run(join(prefix, 'bin', 'rootbox'), [...a, '--config', join(etc, 'config.json')], { timeoutMs: 120_000 });
  if (daemon?.pid && daemon.exitCode === null) {
    for (const id of servers) await cli('servers', 'delete', id, '--yes');
    daemon.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 30_000))]);
    if (daemon.exitCode === null && daemon.signalCode === null) daemon.kill('SIGKILL');
  }
  for (const id of servers) await run('runc', ['--root', join(data, 'runc'), 'delete', '--force', id]);
  await run('nft', ['delete', 'table', 'inet', net.nftTable]);
  await run('nft', ['delete', 'table', 'bridge', net.nftTable]);
  await run('ip', ['link', 'del', net.bridge]);
  await run('umount', ['-l', join(data, 'lxcfs')]);
  rmSync(root, { recursive: true, force: true });
});

test('install puts program, config, image and unit in a scratch root (never var/), twice without harm; the ports given are kept', async () => {
  const args = ['install', '--prefix', prefix, '--etc', etc, '--data-dir', data, '--unit-dir', unitDir, '--domain', 'example.test', '--no-enable'];
  const [http, https, ssh] = [await freePort(), await freePort(), await freePort()];
  const ports = ['--http-port', String(http), '--https-port', String(https), '--ssh-port', String(ssh)];
  for (let i = 0; i < 2; i++) {
    const r = await run(rootboxBin, i === 0 ? [...args, ...ports] : args, { timeoutMs: 900_000 });
    assert.is(r.code, 0, r.stderr + r.stdout);
    assert.match(r.stdout, `ports: HTTP ${http}, HTTPS ${https}, SSH ${ssh} (TCP, open them`);
  }
  for (const f of [
    'dist/rootbox.js',
    'bin/rootbox',
    'package.json',
    'node_modules/lmdb/package.json',
    'node_modules/node-pty/package.json',
    'node_modules/ssh2/package.json',
  ])
    assert.ok(existsSync(join(prefix, f)), f);
  for (const f of ['var', '.git', 'test', 'src/cli.ts', 'node_modules/esbuild', 'node_modules/uvu']) assert.not.ok(existsSync(join(prefix, f)), f);
  // the Node the checkout ships (scripts/setup put it there: the host's is older) goes with the program
  if (existsSync(join(checkout, 'node', 'bin', 'node')))
    assert.is(readFileSync(join(prefix, 'node', '.integrity'), 'utf8'), readFileSync(join(checkout, 'node', '.integrity'), 'utf8'));
  const conf = JSON.parse(readFileSync(join(etc, 'config.json'), 'utf8'));
  assert.equal([conf.domain, conf.dataDir, conf.runtime.imageDir], ['example.test', data, join(data, 'images')]);
  // production: the ports given (kept by the second run, which named none) and plain HTTP redirecting to HTTPS
  assert.equal([conf.http.port, conf.https.port, conf.ssh.port, conf.http.redirect], [http, https, ssh, true]);
  const text = readFileSync(unitFile, 'utf8');
  const unit = service(text);
  assert.equal(unit.get('ExecStart'), [`${prefix}/bin/rootbox serve --config ${etc}/config.json`]);
  // its comments name the installed paths, not the default prefix
  const comments = text.split('\n').filter((l) => l.startsWith('#'));
  assert.ok(
    comments.some((l) => l.includes(`${prefix}/node`)),
    comments.join('\n'),
  );
  assert.not.ok(
    comments.some((l) => l.includes('/opt/rootbox') || l.includes('/etc/rootbox')),
    comments.join('\n'),
  );
});

test('install refuses a port flag that is not a TCP port, before installing anything', async () => {
  const r = await run(rootboxBin, ['install', '--prefix', join(root, 'never'), '--https-port', '70000', '--no-enable'], { timeoutMs: 60_000 });
  assert.is(r.code, 1, r.stdout);
  assert.match(r.stderr, "--https-port takes a TCP port from 1 to 65535, not '70000'");
  assert.not.ok(existsSync(join(root, 'never')));
});

test('systemd-analyze verify accepts the installed unit', async () => {
  const r = await run('systemd-analyze', ['verify', unitFile]);
  assert.is(r.code, 0, r.stderr + r.stdout);
  assert.is(r.stderr.trim(), '', r.stderr);
});

test("the unit's ExecStart, run with the unit's environment, serves a server created through the API", async () => {
  const [http, https, ssh] = [await freePort(), await freePort(), await freePort()];
  // the test-safe settings of this host go into the installed config, as an operator would add keys
  const file = join(etc, 'config.json');
  const conf = JSON.parse(readFileSync(file, 'utf8'));
  Object.assign(conf, {
    publicIp: '127.0.0.1',
    http: { host: '127.0.0.1', port: http },
    https: { host: '127.0.0.1', port: https },
    ssh: { host: '127.0.0.1', port: ssh },
    shutdownTimeout: '5s',
  });
  conf.runtime = { ...conf.runtime, ...net, subnet: `10.198.${n}.0/24`, uidStart: 2_100_000_000 + n * 65536 * 8, uidRanges: 8, stopGrace: '1s' };
  writeFileSync(file, JSON.stringify(conf, null, 2));
  writeFileSync(join(etc, 'env'), '# operator overrides\nROOTBOX_LOG_LEVEL=info\n');

  const unit = service(readFileSync(unitFile, 'utf8'));
  const env: NodeJS.ProcessEnv = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8' };
  for (const e of unit.get('Environment') ?? []) for (const kv of e.split(/\s+/)) env[kv.slice(0, kv.indexOf('='))] = kv.slice(kv.indexOf('=') + 1);
  for (const ef of unit.get('EnvironmentFile') ?? []) {
    const path = ef.replace(/^-/, '');
    if (!existsSync(path)) continue;
    for (const l of readFileSync(path, 'utf8').split('\n')) if (/^[A-Z_]+=/.test(l)) env[l.slice(0, l.indexOf('='))] = l.slice(l.indexOf('=') + 1);
  }
  const [cmd, ...args] = unit.get('ExecStart')![0].split(/\s+/);
  let log = '';
  daemon = spawn(cmd, args, { cwd: unit.get('WorkingDirectory')![0], env, stdio: ['ignore', 'pipe', 'pipe'] });
  exited = new Promise((r) => daemon!.once('exit', r));
  daemon.stdout!.on('data', (c) => (log += c));
  daemon.stderr!.on('data', (c) => (log += c));
  const until = Date.now() + 120_000;
  for (;;) {
    const up = await call(http, 'GET', '/', { host: 'api.example.test' }).catch(() => undefined);
    if (up) break;
    assert.ok(daemon.exitCode === null && Date.now() < until, `daemon did not come up: ${log.slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 300));
  }
  const c = await call(http, 'POST', '/create', { host: 'api.example.test' });
  assert.is(c.status, 200, JSON.stringify(c.body) + log.slice(-2000));
  servers.push(c.body.id);
  const slug = c.body.subdomain.split('.')[0];
  assert.is(c.body.subdomain, `${slug}.example.test`);
  const v = await run('curl', ['-sS', '-m', '30', '-H', `Host: ${slug}.example.test`, '-w', '\n%{http_code}', `http://127.0.0.1:${http}/`]);
  assert.ok(v.stdout.endsWith('\n200'), v.stdout + v.stderr);
  const s = await run('runc', ['--root', join(data, 'runc'), 'state', c.body.id]);
  assert.is(JSON.parse(s.stdout).status, 'running', s.stderr);
  // the daemon runs on the supported Node (the one installed beside it when the host's is older)
  const st = await run(join(prefix, 'bin', 'rootbox'), ['status', '--json', '--config', file], { env, timeoutMs: 60_000 });
  assert.is(st.code, 0, st.stderr);
  const node = JSON.parse(st.stdout).daemon.node as string;
  assert.ok(Number(node.slice(1).split('.')[0]) >= 24, node);
  if (existsSync(join(prefix, 'node', 'bin', 'node'))) assert.is(node, (await run(join(prefix, 'node', 'bin', 'node'), ['--version'])).stdout.trim());
});

test('a data dir under a 0700 parent is refused by doctor and serve, naming the chmod', async () => {
  const parent = join(root, 'private');
  mkdirSync(parent, { mode: 0o700 });
  chmodSync(parent, 0o700);
  const env = { ...process.env, ROOTBOX_DATA_DIR: join(parent, 'data'), ROOTBOX_IMAGE_DIR: join(data, 'images') };
  const doc = await run(rootboxBin, ['doctor'], { env, timeoutMs: 60_000 }).catch((e) => e);
  assert.is(doc.code, 1, doc.stdout);
  assert.match(doc.stdout, `chmod o+x ${parent}`);
  const srv = await run(rootboxBin, ['serve'], {
    env: {
      ...env,
      ROOTBOX_HTTP_PORT: '0',
      ROOTBOX_HTTPS_PORT: '0',
      ROOTBOX_SSH_PORT: '0',
      ROOTBOX_HTTP_HOST: '127.0.0.1',
      ROOTBOX_HTTPS_HOST: '127.0.0.1',
      ROOTBOX_SSH_HOST: '127.0.0.1',
    },
    timeoutMs: 60_000,
  });
  assert.is(srv.code, 1, srv.stdout + srv.stderr);
  assert.match(srv.stderr + srv.stdout, `run: chmod o+x ${parent}`);
  assert.not.ok(existsSync(join(parent, 'data', 'runc')), 'nothing of the runtime was made');
});

test('serve with no built image names the exact command that builds it, before touching the data dir', async () => {
  const empty = join(root, 'no-images');
  const env = { ...process.env, ROOTBOX_DATA_DIR: join(root, 'data3'), ROOTBOX_IMAGE_DIR: empty };
  const srv = await run(rootboxBin, ['serve'], { env, timeoutMs: 60_000 });
  assert.is(srv.code, 1, srv.stdout + srv.stderr);
  assert.match(srv.stderr, `run: ROOTBOX_IMAGE_DIR=${empty} ROOTBOX_IMAGE=bookworm ${rootboxBin} image build`);
  assert.not.ok(existsSync(join(root, 'data3')), 'the data dir was not touched');
});

test('uninstall removes unit and program and keeps data and config; --purge removes those too', async () => {
  const dirs = ['--prefix', join(root, 'opt2'), '--etc', join(root, 'etc2'), '--data-dir', join(root, 'data2'), '--unit-dir', join(root, 'unit2')];
  const i = await run(rootboxBin, ['install', ...dirs, '--no-enable'], { timeoutMs: 900_000 });
  assert.is(i.code, 0, i.stderr + i.stdout);
  const u = await run(rootboxBin, ['uninstall', ...dirs], { timeoutMs: 60_000 });
  assert.is(u.code, 0, u.stderr);
  assert.equal(
    ['opt2', 'unit2/rootbox.service', 'etc2/config.json', 'data2/images'].map((f) => existsSync(join(root, f))),
    [false, false, true, true],
  );
  const p = await run(rootboxBin, ['uninstall', ...dirs, '--purge'], { timeoutMs: 60_000 });
  assert.is(p.code, 0, p.stderr);
  assert.equal(
    ['etc2', 'data2'].map((f) => existsSync(join(root, f))),
    [false, false],
  );
});

test.run();
