// A daemon SIGKILLed while it parks a server (runc create at sleep time, runtime.parkOnSleep):
// the real daemon as a process, killed while the host shows that server's `runc create`, then
// started again on the same data dir. The server is asleep after the restart, and the host holds
// either a parked container (`created`, nothing but its init in the server's cgroup) or nothing of
// it at all — no stray init, no empty cgroup; the server then restarts (stop + start) and runs.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readdirSync, readFileSync } from 'node:fs';
import { cgroupDirs } from '../../src/runtime/cgroup.js';
import { cgroupPath } from '../../src/runtime/spec.js';
import { scanHost } from '../hosting/helpers/hostscan.js';
import { api } from '../hosting/helpers/killload.js';
import { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { until as waitUntil } from '../helpers/wait.js';
const until = <T>(what: string, cond: () => T | Promise<T>, ms = 30_000) => waitUntil(what, cond, ms, 1);

let d: ProcDaemon;

test.before(async () => {
  d = new ProcDaemon({ config: { proxy: { idleTimeout: '1s', idleCheckInterval: '100ms' } } });
  await d.start();
});
test.after(async () => {
  await d?.remove();
});

/** Pids of `runc create` commands for this server (the park under way). */
const creating = (id: string): number[] =>
  readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        const argv = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
        return argv[0].endsWith('runc') && argv.includes('create') && argv.includes(id);
      } catch {
        return false;
      }
    })
    .map(Number);

test('a SIGKILL while a server is being parked leaves it asleep with a parked container or none, and no debris', async () => {
  const c = await api(d.http, 'POST', '/create');
  assert.is(c.status, 200, JSON.stringify(c.body));
  const id = c.body.id as string;
  // the idle stop, then its park: killed while runc create runs for this server
  await until('the park under way', () => creating(id).length > 0);
  await d.kill();
  await d.start();
  const h = await scanHost({ dataDir: d.dataDir, bridge: d.bridge, table: d.table, pool: d.pool });
  const mine = h.runc.filter((x) => x.id === id);
  const s = await api(d.http, 'GET', `/servers/${id}`, { key: c.body.api_key });
  assert.is(s.status, 200, JSON.stringify(s.body));
  if (mine.length) {
    assert.equal(
      mine.map((x) => x.status),
      ['created'],
      'parked, or nothing',
    );
    const st = JSON.parse(readFileSync(`${d.dataDir}/runc/${id}/state.json`, 'utf8'));
    const dirs = cgroupDirs(cgroupPath({ nftTable: d.table }, id));
    const procs = readFileSync(`${dirs.find((x) => x.includes('/pids/')) ?? dirs[0]}/cgroup.procs`, 'utf8')
      .trim()
      .split('\n');
    assert.equal(procs, [String(st.init_process_pid)], 'only the parked init');
  } else assert.equal(cgroupDirs(cgroupPath({ nftTable: d.table }, id)), [], 'no container, so no cgroup');
  const r = await api(d.http, 'POST', `/servers/${id}/restart`, { key: c.body.api_key });
  assert.is(r.status, 200, JSON.stringify(r.body));
  assert.is(r.body.state, 'running');
});

test.run();
