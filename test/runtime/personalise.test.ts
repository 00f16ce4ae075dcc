// The files the daemon writes as host root into a new server's root before its first start (its
// name files; a fork's identity reset) never go through a link the tenant left in its disk: a
// checkpoint whose /etc is `ln -s /some/host/dir` forked or moved leaves that host dir untouched.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { personalise } from '../../src/runtime/bundle.js';
import { resetIdentity } from '../../src/runtime/forkidentity.js';

const dirs: string[] = [];
const fresh = () => {
  const d = mkdtempSync(join(tmpdir(), 'rbx-personalise-'));
  dirs.push(d);
  return d;
};
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** A host directory the tenant's link points at, with files of the names the daemon writes. */
function victim(): { dir: string; before: Record<string, string> } {
  const dir = fresh();
  const before: Record<string, string> = {
    hostname: 'the-host\n',
    hosts: '10.0.0.1 db\n',
    'resolv.conf': 'nameserver 10.0.0.53\n',
    'machine-id': 'f'.repeat(32) + '\n',
  };
  for (const [name, text] of Object.entries(before)) writeFileSync(join(dir, name), text);
  mkdirSync(join(dir, 'ssh'));
  writeFileSync(join(dir, 'ssh', 'ssh_host_ed25519_key'), 'HOST KEY');
  return { dir, before };
}
const unchanged = (v: { dir: string; before: Record<string, string> }) => {
  for (const [name, text] of Object.entries(v.before)) assert.is(readFileSync(join(v.dir, name), 'utf8'), text, `${name} untouched`);
  assert.is(readFileSync(join(v.dir, 'ssh', 'ssh_host_ed25519_key'), 'utf8'), 'HOST KEY');
};

test('a root whose /etc is a link to a host directory: the name files and the identity reset leave that directory untouched', () => {
  const v = victim();
  const root = fresh();
  symlinkSync(v.dir, join(root, 'etc'));
  assert.is(personalise(root, process.getuid!(), 'fork-1'), false, 'nothing written');
  resetIdentity(root);
  unchanged(v);
  assert.ok(lstatSync(join(root, 'etc')).isSymbolicLink(), "the tenant's link is left as it is");
});

test('a real /etc whose files are links to host files: the links are replaced, their targets untouched', () => {
  const v = victim();
  const root = fresh();
  mkdirSync(join(root, 'etc'));
  for (const name of ['hostname', 'hosts', 'resolv.conf', 'machine-id']) symlinkSync(join(v.dir, name), join(root, 'etc', name));
  assert.is(personalise(root, process.getuid!(), 'fork-2'), true);
  resetIdentity(root);
  unchanged(v);
  assert.is(readFileSync(join(root, 'etc', 'hostname'), 'utf8'), 'fork-2\n');
  assert.ok(lstatSync(join(root, 'etc', 'hosts')).isFile());
  assert.ok(readdirSync(join(root, 'etc')).includes('resolv.conf'));
});

test.run();
