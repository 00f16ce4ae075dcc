// The checkpoint routes on a real daemon with real runc servers (issue 37): a 50 MB random file
// written over SSH survives checkpoint → change → restore byte-exact (sha256); the list is newest
// first; a fork is a new server of the same account (its own id, subdomain and key pair, reached
// over SSH with that key) whose disk is the checkpoint's, independent of its source both ways and
// without its identity files (SSH host keys, machine id); another account's key gets 404 on every
// checkpoint route; a deleted checkpoint is gone.

import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { send } from '../http/contract.js';
import { ensureBuilt, rootboxBin } from '../billing/api.js';
import { CLIENT_OPTS } from '../ssh/helpers/env.js';

let d: TestDaemon;
let id = '';
let key = '';
let otherKey = '';
const work = mkdtempSync(join(tmpdir(), 'rbx-ckp-api-'));

test.before(async () => {
  ensureBuilt();
  d = await startTestDaemon({ hosting: { rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000 }, anonServersPerIp: 10 } });
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  const created = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(created.status, 200, created.text);
  ({ id, api_key: key } = created.json);
  writeFileSync(join(work, id), created.json.ssh_private_key, { mode: 0o600 });
  const other = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(other.status, 200, other.text);
  otherKey = other.json.api_key;
});
test.after(async () => {
  await d?.stop();
  rmSync(work, { recursive: true, force: true });
});

const api = (method: string, path: string, body?: unknown, k = key) =>
  send(d.http, 'api.localhost', method, path, { headers: { authorization: `Bearer ${k}` }, ...(body === undefined ? {} : { body }) });
const ssh = async (server: string, command: string) => {
  const r = await run('ssh', ['-p', String(d.daemon.ssh.port), '-i', join(work, server), ...CLIENT_OPTS, 'root@127.0.0.1', command], { timeoutMs: 60_000 });
  assert.is(r.code, 0, r.stderr);
  return r.stdout.trim();
};
const sha = (server: string, path: string) => ssh(server, `sha256sum ${path} | cut -d' ' -f1`);

let cid = '';
let bigSha = '';
let forked = '';

test('a 50 MB file written over SSH survives checkpoint → change → restore byte-exact', async () => {
  bigSha = await ssh(id, 'head -c 50000000 /dev/urandom > /root/big && sync && sha256sum /root/big | cut -d" " -f1');
  const c = await api('POST', `/servers/${id}/checkpoints`, { comment: 'before the change' });
  assert.is(c.status, 201, c.text);
  assert.match(c.json.id, /^ckp_[0-9a-z]{22}$/);
  assert.is(c.json.server_id, id);
  assert.is(c.json.kind, 'manual');
  assert.ok(c.json.size_bytes >= 50_000_000, String(c.json.size_bytes));
  assert.ok(!Number.isNaN(Date.parse(c.json.created_at)));
  cid = c.json.id;

  await ssh(id, 'head -c 1000 /dev/urandom > /root/big && echo new > /root/later && sync');
  assert.is.not(await sha(id, '/root/big'), bigSha);
  const second = await api('POST', `/servers/${id}/checkpoints`);
  assert.is(second.status, 201, second.text);
  const list = await api('GET', `/servers/${id}/checkpoints`);
  assert.is(list.status, 200);
  assert.equal(
    list.json.checkpoints.map((x: { id: string }) => x.id),
    [second.json.id, cid],
    'newest first',
  );

  const r = await api('POST', `/servers/${id}/restore`, { checkpoint: cid });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.checkpoint.id, cid);
  assert.is(await sha(id, '/root/big'), bigSha);
  assert.is(await ssh(id, 'test -e /root/later; echo $?'), '1');
});

test('the operator lists the checkpoints and restores one with the CLI', async () => {
  const cli = (...args: string[]) => run(rootboxBin, args, { env: { ...process.env, ROOTBOX_DATA_DIR: d.dataDir }, timeoutMs: 120_000 });
  const listed = await cli('servers', 'checkpoints', id, '--json');
  assert.is(listed.code, 0, listed.stderr);
  const ids = JSON.parse(listed.stdout).checkpoints.map((c: { id: string }) => c.id);
  assert.is(ids[ids.length - 1], cid, 'the oldest last');
  const table = await cli('servers', 'checkpoints', id);
  assert.match(table.stdout, /ID\s+CREATED\s+KIND/);
  assert.ok(table.stdout.includes(cid));
  await ssh(id, 'rm /root/big && sync');
  const restored = await cli('servers', 'restore', id, cid);
  assert.is(restored.code, 0, restored.stderr);
  assert.match(restored.stdout, new RegExp(`restored to ${cid}`));
  assert.is(await sha(id, '/root/big'), bigSha);
  const missing = await cli('servers', 'restore', id, 'ckp_0000000000000000000000');
  assert.is.not(missing.code, 0);
  assert.match(missing.stderr, /checkpoint/);
});

test('a fork is a new server of the account from the checkpoint, independent of its source both ways', async () => {
  const f = await api('POST', `/servers/${id}/fork`, { checkpoint: cid });
  assert.is(f.status, 201, f.text);
  const fork = f.json.id as string;
  assert.is.not(fork, id);
  assert.match(f.json.subdomain, /\.localhost$/);
  assert.ok(String(f.json.ssh_private_key).includes('PRIVATE KEY'));
  writeFileSync(join(work, fork), f.json.ssh_private_key, { mode: 0o600 });
  assert.is(await sha(fork, '/root/big'), bigSha);
  assert.is(await ssh(fork, 'stat -c %u:%g /root/big; hostname'), `0:0\n${String(f.json.subdomain).split('.')[0]}`);
  await ssh(fork, 'echo fork > /root/only-fork');
  await ssh(id, 'echo source > /root/only-source');
  assert.is(await ssh(id, 'test -e /root/only-fork; echo $?'), '1');
  assert.is(await ssh(fork, 'test -e /root/only-source; echo $?'), '1');
  const servers = await api('GET', '/servers');
  assert.ok(servers.json.servers.some((s: { id: string }) => s.id === fork));

  // without a checkpoint: one is taken now, with what the source has at this moment — and the
  // identity files the source generated inside itself (SSH host keys, machine id) stay its own
  const machineId = '0123456789abcdef0123456789abcdef';
  await ssh(
    id,
    'mkdir -p /etc/ssh /var/lib/dbus && for t in rsa ecdsa ed25519; do echo secret-$t > /etc/ssh/ssh_host_${t}_key; echo pub-$t > /etc/ssh/ssh_host_${t}_key.pub; done && ' +
      `ln -s /etc/passwd /etc/ssh/ssh_host_link_key && echo ${machineId} > /etc/machine-id && ln -sf /etc/machine-id /var/lib/dbus/machine-id && echo kept > /etc/ssh/sshd_config && sync`,
  );
  const now = await api('POST', `/servers/${id}/fork`, {});
  assert.is(now.status, 201, now.text);
  writeFileSync(join(work, now.json.id), now.json.ssh_private_key, { mode: 0o600 });
  forked = now.json.id;
  assert.is(await ssh(now.json.id, 'cat /root/only-source'), 'source');
  const inFork = (await ssh(forked, 'ls /etc/ssh')).split('\n');
  assert.equal(
    inFork.filter((n) => n.startsWith('ssh_host_')),
    [],
    'no host key, and no link to one, in the fork',
  );
  assert.ok(inFork.includes('sshd_config'), 'the rest of /etc/ssh is the source’s');
  assert.match(await ssh(forked, 'head -1 /etc/passwd'), /^root:/, 'a key that was a link: the link removed, not its target');
  const forkId = await ssh(forked, 'cat /etc/machine-id');
  assert.match(forkId, /^[0-9a-f]{32}$/);
  assert.is.not(forkId, machineId, 'a machine id of its own');
  assert.is(await ssh(forked, 'readlink /var/lib/dbus/machine-id'), '/etc/machine-id');
  assert.is(await ssh(id, 'cat /etc/machine-id /etc/ssh/ssh_host_ed25519_key'), `${machineId}\nsecret-ed25519`, 'the source keeps its own');
});

test("another account's key gets 404 on every checkpoint route", async () => {
  const calls: [string, string, unknown?][] = [
    ['POST', `/servers/${id}/checkpoints`, {}],
    ['GET', `/servers/${id}/checkpoints`],
    ['DELETE', `/servers/${id}/checkpoints/${cid}`],
    ['POST', `/servers/${id}/restore`, { checkpoint: cid }],
    ['POST', `/servers/${id}/fork`, { checkpoint: cid }],
  ];
  for (const [method, path, body] of calls) {
    const r = await api(method, path, body, otherKey);
    assert.is(r.status, 404, `${method} ${path}: ${r.text}`);
    assert.is(r.json.error, 'server_not_found');
  }
  const unknown = await api('POST', `/servers/${id}/restore`, { checkpoint: 'ckp_0000000000000000000000' });
  assert.is(unknown.status, 404);
  assert.is(unknown.json.error, 'checkpoint_not_found');
});

test('a deleted checkpoint is gone from the list and answers 404 after', async () => {
  const del = await api('DELETE', `/servers/${id}/checkpoints/${cid}`);
  assert.is(del.status, 200, del.text);
  const list = await api('GET', `/servers/${id}/checkpoints`);
  assert.not.ok(list.json.checkpoints.some((x: { id: string }) => x.id === cid));
  const again = await api('DELETE', `/servers/${id}/checkpoints/${cid}`);
  assert.is(again.status, 404);
  assert.is(again.json.error, 'checkpoint_not_found');
  const restore = await api('POST', `/servers/${id}/restore`, { checkpoint: cid });
  assert.is(restore.status, 404);
});

test("a deleted server's checkpoints go with it", async () => {
  const c = await api('POST', `/servers/${forked}/checkpoints`);
  assert.is(c.status, 201, c.text);
  const manifests = join(d.dataDir, 'checkpoints', 'manifests', forked);
  assert.is(readdirSync(manifests).length, 1);
  const del = await api('DELETE', `/servers/${forked}`);
  assert.is(del.status, 200, del.text);
  assert.equal(existsSync(manifests) ? readdirSync(manifests) : [], []);
  assert.equal(d.daemon.store.checkpoints.list(forked), []);
});

test.run();
