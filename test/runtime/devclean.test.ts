// `rootbox dev clean` (src/runtime/clean.ts): after a development daemon stops, its containers keep
// running and its mounts, loop devices, lxcfs, bridge and nft tables stay on the host; the command
// removes them all and keeps the data, and refuses while a daemon runs on those names.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { run } from '../helpers/run.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { get } from '../proxy/helpers.js';
import { mountsUnder } from '../../src/runtime/clean.js';
import { ContainerRuntime } from '../../src/runtime/index.js';

const repo = new URL('../../', import.meta.url).pathname;
let d: TestDaemon | undefined;
let stopped = false;

test.after(async () => {
  if (d && !stopped) await d.stop();
  else if (d) {
    // the test failed after the daemon's stop: remove what the command did not
    await clean(d, '--purge');
    rmSync(cliConfig(d), { force: true });
  }
});

/** The CLI's config: the test daemon's names (its data dir, bridge, table, subnet, uid ranges, port pool). */
function cliConfig(t: TestDaemon): string {
  const r = t.cfg.runtime;
  const file = join(t.dataDir, '..', `${t.dataDir.split('/').pop()}.json`);
  const runtime = { imageDir: r.imageDir, bridge: r.bridge, nftTable: r.nftTable, subnet: r.subnet, uidStart: r.uidStart, uidRanges: r.uidRanges };
  writeFileSync(file, JSON.stringify({ dataDir: t.dataDir, runtime, hosting: { portPool: t.cfg.hosting.portPool }, metrics: { listen: 'off' } }));
  return file;
}
const clean = (t: TestDaemon, ...flags: string[]) => run(join(repo, 'bin', 'rootbox'), ['dev', 'clean', '--config', cliConfig(t), ...flags]);

const loopsOf = async (dir: string) => (await run('losetup', ['-n', '-l', '-O', 'BACK-FILE'])).stdout.split('\n').filter((f) => f.trim().startsWith(dir + '/'));

test('dev clean is refused while the daemon runs, and after its stop removes containers, mounts, loops, lxcfs, bridge and tables, keeping the data', async () => {
  d = await startTestDaemon({ publicIp: '127.0.0.1' });
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(r.status, 200, r.text);
  const id = (JSON.parse(r.text) as { id: string }).id;
  const rt = d.daemon.runtime as ContainerRuntime;
  assert.is(rt.get(id)?.state, 'running');

  const refused = await clean(d);
  assert.is.not(refused.code, 0, 'refused while the daemon runs');
  assert.match(refused.stderr + refused.stdout, 'another rootbox daemon');
  assert.ok(existsSync(`/sys/class/net/${d.cfg.runtime.bridge}`), 'nothing removed by the refused command');

  await d.daemon.stop(); // a daemon's stop leaves its servers running
  stopped = true;
  assert.ok(mountsUnder(d.dataDir).length > 0, 'the stopped daemon left mounts');
  assert.ok((await loopsOf(d.dataDir)).length > 0, 'and loop devices');

  const done = await clean(d);
  assert.is(done.code, 0, done.stderr);
  assert.match(done.stdout, `containers removed: ${id}`);
  assert.equal(mountsUnder(d.dataDir), []);
  assert.equal(await loopsOf(d.dataDir), []);
  assert.not.ok(existsSync(`/sys/class/net/${d.cfg.runtime.bridge}`), 'bridge removed');
  assert.is.not((await run('nft', ['list', 'table', 'inet', d.cfg.runtime.nftTable])).code, 0, 'nft table removed');
  assert.is((await run('runc', ['--root', join(d.dataDir, 'runc'), 'list', '-q'])).stdout.trim(), '');
  assert.ok(existsSync(join(d.dataDir, 'servers', id, 'disk.img')), "the server's disk is kept");
  rmSync(d.dataDir, { recursive: true, force: true });
  rmSync(cliConfig(d), { force: true });
  d = undefined;
});

test.run();
