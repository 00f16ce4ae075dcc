// A crash at chosen points of a create, a delete and right after an expose: the real daemon as a
// process, SIGKILLed when the host shows the step under way, then started again on the same data
// dir. What was answered is there, what was not is gone whole.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../../src/store/index.js';
import { idsIn, scanHost, withCgroups } from './helpers/hostscan.js';
import { api, keyHash } from './helpers/killload.js';
import { mountsUnder, ProcDaemon } from './helpers/procdaemon.js';
import { run } from '../helpers/run.js';

let d: ProcDaemon;
/** Key hashes of the accounts whose api_key a create answered. */
const known = new Set<string>();

async function create() {
  const r = await api(d.http, 'POST', '/create');
  assert.is(r.status, 200, JSON.stringify(r.body));
  known.add(keyHash(r.body.api_key));
  return r.body as { id: string; api_key: string };
}

test.before(async () => {
  d = new ProcDaemon({ config: { hosting: { anonServersPerIp: 3, rateLimit: { createsPerIpPerHour: 1000 } }, proxy: { idleTimeout: '1h' } } });
  await d.start();
});
test.after(async () => {
  await d?.remove();
});

const listens = (port: number) =>
  new Promise<boolean>((r) => {
    const s = connect(port, '127.0.0.1');
    s.on('connect', () => (s.destroy(), r(true)));
    s.on('error', () => r(false));
  });

async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

async function records() {
  const store = openStore(d.dataDir);
  try {
    return {
      servers: store.servers.all({ withPending: true }),
      runtime: store.runtime.all(),
      unknownAccounts: store.accounts.all().filter((a) => !known.has(a.keyHash)),
      exposures: store.exposures.all(),
    };
  } finally {
    await store.close();
  }
}

const scan = () => scanHost({ dataDir: d.dataDir, bridge: d.bridge, table: d.table, pool: d.pool });

test('exposes answered right after a start survive a SIGKILL right after their answers', async () => {
  const c = { body: await create() };
  await d.kill();
  await d.start();
  const acked: string[] = [];
  for (const port of [7000, 7001]) {
    const e = await api(d.http, 'POST', '/expose', { key: c.body.api_key, body: { server: c.body.id, port } });
    assert.is(e.status, 200, JSON.stringify(e.body));
    acked.push(e.body.public);
  }
  await d.kill();
  await d.start();
  const got = await api(d.http, 'GET', `/servers/${c.body.id}`, { key: c.body.api_key });
  assert.equal(got.body.exposed_ports.map((p: { public: string }) => p.public).sort(), acked.sort());
  for (const a of acked) assert.ok(await listens(Number(a.split(':').pop())), `${a} listens`);
  assert.is((await api(d.http, 'DELETE', `/servers/${c.body.id}`, { key: c.body.api_key })).status, 200);
});

test('a delete cut off by a crash is finished at the next start: the server never comes back without its exposed ports', async () => {
  const c = { body: await create() };
  const e = await api(d.http, 'POST', '/expose', { key: c.body.api_key, body: { server: c.body.id, port: 7000 } });
  assert.is(e.status, 200, JSON.stringify(e.body));
  const port = Number(e.body.public.split(':').pop());
  assert.ok(await listens(port));
  const answer = api(d.http, 'DELETE', `/servers/${c.body.id}`, { key: c.body.api_key });
  // the exposed port closes first; the container, mounts and records follow
  await until('the exposed port to close', async () => !(await listens(port)));
  await d.kill();
  const cut = (await answer).status === 0;
  await d.start();
  const got = await api(d.http, 'GET', `/servers/${c.body.id}`, { key: c.body.api_key });
  if (got.status === 200) {
    // not deleted: then whole, with its acknowledged port
    assert.equal(
      got.body.exposed_ports.map((p: { public: string }) => p.public),
      [e.body.public],
      'a server that stayed keeps its exposed port',
    );
    assert.ok(await listens(port), 'and it listens');
  } else {
    assert.is(got.status, 404);
    const rec = await records();
    assert.equal(
      rec.servers.map((s) => s.id),
      [],
    );
    assert.equal(
      rec.runtime.map((r) => r.id),
      [],
    );
    assert.equal(
      rec.exposures.map((x) => x.port),
      [],
    );
    assert.equal([...idsIn(await scan())], [], 'nothing of it on the host');
    assert.equal(withCgroups(d.table, [c.body.id]), []);
  }
  assert.ok(cut || got.status === 404, 'an answered delete is never undone');
});

test('a create cut off by a crash leaves no server, account, mount, loop device, container, address or cgroup, and does not use up the per-IP cap', async () => {
  let cut = false;
  let id = '';
  for (let attempt = 0; attempt < 3 && !cut; attempt++) {
    const answer = api(d.http, 'POST', '/create');
    // the rootfs is mounted part-way through a create, before its container exists
    await until('a rootfs mount', () => mountsUnder(join(d.dataDir, 'servers')).some((m) => m.endsWith('/rootfs')));
    id = /srv_[0-9a-f]+/.exec(mountsUnder(join(d.dataDir, 'servers')).find((m) => m.endsWith('/rootfs'))!)![0];
    await d.kill();
    cut = (await answer).status === 0;
    await d.start();
    if (!cut) {
      const r = await answer;
      known.add(keyHash(r.body.api_key));
      await api(d.http, 'DELETE', `/servers/${r.body.id}`, { key: r.body.api_key });
    }
  }
  assert.ok(cut, 'a create was cut off by the kill');
  const rec = await records();
  assert.equal(
    rec.servers.map((s) => s.id),
    [],
    'no server record',
  );
  assert.equal(
    rec.runtime.map((r) => `${r.id} ${r.ip} ${r.uidBase}`),
    [],
    'no runtime record, address or uid range',
  );
  assert.equal(
    rec.unknownAccounts.map((a) => a.id),
    [],
    'no account whose api_key nobody got',
  );
  const h = await scan();
  assert.equal([...idsIn(h)], [], 'no mount, loop device, server dir or container');
  assert.equal(h.veths, []);
  assert.equal(h.nftElements, []);
  assert.equal(withCgroups(d.table, [id]), [], 'no cgroup');
  const made = [];
  for (let i = 0; i < 3; i++) made.push(await create()); // the per-IP cap of 3 is all free
  for (const m of made) assert.is((await api(d.http, 'DELETE', `/servers/${m.id}`, { key: m.api_key })).status, 200);
});

test('a runtime command a killed daemon left running on its data dir is ended before reconcile', async () => {
  // stands in for a `mount` or `runc create` the killed daemon started: a process named like the
  // tool, with an argument inside the data dir, that would otherwise run on after the restart
  const bin = mkdtempSync(join(tmpdir(), 'rbx-tool-'));
  symlinkSync('/usr/bin/tail', join(bin, 'mount'));
  const file = join(d.dataDir, 'leftover.img');
  writeFileSync(file, '');
  const other = join(bin, 'other.img'); // the same tool outside the data dir is left alone
  writeFileSync(other, '');
  const tool = spawn(join(bin, 'mount'), ['-f', file], { stdio: 'ignore' });
  const bystander = spawn(join(bin, 'mount'), ['-f', other], { stdio: 'ignore' });
  try {
    await d.kill();
    await d.start();
    await until('the leftover to end', () => tool.exitCode !== null || tool.signalCode !== null, 5_000);
    assert.is(tool.signalCode, 'SIGKILL');
    assert.is(bystander.exitCode, null, 'a process outside the data dir runs on');
    assert.ok(d.current().some((l) => l.msg === 'reconcile: ended commands a previous daemon left running'));
  } finally {
    tool.kill('SIGKILL');
    bystander.kill('SIGKILL');
    rmSync(bin, { recursive: true, force: true });
    rmSync(file, { force: true });
  }
});

test('a restart removes network state and loop devices of servers that no longer exist', async () => {
  // what a crash between two steps can leave: an egress element and counter, a veth on the
  // bridge, and a server directory whose image is still attached to a loop device
  const ip = `10.194.${d.n}.250`;
  const nft = await run('nft', ['-f', '-'], {
    input: `add counter inet ${d.table} eg_${ip.replace(/\./g, '_')}\nadd element inet ${d.table} egress { ${ip} : "eg_${ip.replace(/\./g, '_')}" }\n`,
  });
  assert.is(nft.code, 0, nft.stderr);
  const veth = `${d.bridge}v${(250).toString(36)}`;
  assert.is((await run('ip', ['link', 'add', veth, 'type', 'veth', 'peer', 'name', `${veth}p`])).code, 0);
  assert.is((await run('ip', ['link', 'set', veth, 'master', d.bridge])).code, 0);
  const dir = join(d.dataDir, 'servers', 'srv_0123456789ab');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'disk.img'), '');
  truncateSync(join(dir, 'disk.img'), 8 * 1024 * 1024);
  const loop = (await run('losetup', ['-f', '--show', join(dir, 'disk.img')])).stdout.trim();
  assert.match(loop, /^\/dev\/loop\d+$/);
  try {
    await d.kill();
    await d.start();
    const h = await scan();
    assert.not.ok(h.nftElements.includes(ip), 'egress element gone');
    assert.not.ok(h.nftCounters.includes(`eg_${ip.replace(/\./g, '_')}`), 'counter gone');
    assert.not.ok(h.veths.includes(veth), 'veth gone');
    assert.equal(h.loops, [], 'loop device detached');
    assert.equal(h.dirs, [], 'server dir gone');
  } finally {
    await run('ip', ['link', 'del', veth]);
    await run('losetup', ['-d', loop]);
  }
});

test.run();
