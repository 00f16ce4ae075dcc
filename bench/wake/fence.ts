// bench/wake/fence.ts: what fencing at wake costs in registry mode (issue 28: a host never starts a
// server whose placement names another host). Two daemons of their own in the same run, one a
// single box and one in registry mode on a real PostgreSQL (test/helpers: servers are plain
// processes, so the start itself is cheap and the fence's share shows), each with one server that
// is stopped and woken in turn (each first every other round, same count): the wake p50 of each
// and their ratio; then the fence alone (registry.fence.check, the runtime's start guard, through
// the daemon's registry pool):
// right after a stop, where a wake makes it (the host busy with the stop and the other daemon's
// start), and back to back; and the read it makes (one placement and its tombstone by primary
// key among `--placements` rows) from a pool of its own.
//   ROOTBOX_TEST_RUNTIME=process node --import tsx bench/wake/fence.ts [--wakes 200] [--placements 1000]
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { RegistryNames, RegistryPool } from '../../src/registry/index.js';
import { startTestDaemon, type TestDaemon } from '../../test/helpers/daemon.js';
import { startPostgres } from '../../test/helpers/postgres.js';
import { send } from '../../test/http/contract.js';
import { initRegistry } from '../../test/helpers/cluster.js';

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(3).padStart(8)} ms   p90 ${pct(xs, 90).toFixed(3).padStart(8)} ms   (n=${xs.length})`;
const row = (label: string, value: string) => console.log(`${label.padEnd(44)}${value}`);

const pg = await startPostgres();
const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
const daemons: TestDaemon[] = [];
try {
  await initRegistry(pool);
  const names = new RegistryNames(pool, 'other-host');
  for (let i = 0; i < arg('placements', 1000); i++) {
    await names.claim(`b${i}`, `srv_b${i}`);
    await names.place({ serverId: `srv_b${i}`, accountId: 'acc_b', slug: `b${i}`, publicIp: '127.0.0.2' });
  }
  const single = await startTestDaemon({ publicIp: '127.0.0.1' });
  daemons.push(single);
  const cluster = await startTestDaemon({ publicIp: '127.0.0.1', cluster: { registry: pg.url, host: 'bench-host', lease: '5s' } });
  daemons.push(cluster);
  const ids = await Promise.all(
    daemons.map(async (d) => {
      const r = await send(d.http, 'api.localhost', 'POST', '/create', { body: {} });
      if (r.status !== 200) throw new Error(r.text);
      return r.json.id as string;
    }),
  );
  const wakes: number[][] = [[], []];
  /** The registry daemon's fence at the moment a wake makes it: right after the stop. */
  const atWake: number[] = [];
  for (let i = 0; i < arg('wakes', 200); i++)
    for (const k of i % 2 ? [0, 1] : [1, 0]) {
      // each goes first every other round: the one woken second shares the host with the first's start
      const { daemon } = daemons[k];
      await daemon.runtime.stop(ids[k]);
      if (k === 1) {
        const tf = performance.now();
        await daemon.registry!.fence.check(ids[k]);
        atWake.push(performance.now() - tf);
      }
      const t0 = performance.now();
      await daemon.presence.wake(ids[k]);
      wakes[k].push(performance.now() - t0);
    }
  const fenced: number[] = [];
  for (let i = 0; i < 2000; i++) {
    const t0 = performance.now();
    await daemons[1].daemon.registry!.fence.check(ids[1]);
    fenced.push(performance.now() - t0);
  }
  const reads: number[] = [];
  const here = new RegistryNames(pool, 'bench-host');
  for (let i = 0; i < 2000; i++) {
    const t0 = performance.now();
    await here.fenceOf(ids[1]);
    reads.push(performance.now() - t0);
  }
  row('wake, single box', fmt(wakes[0]));
  row('wake, registry mode (fenced)', fmt(wakes[1]));
  row('ratio registry / single box (p50)', (pct(wakes[1], 50) / pct(wakes[0], 50)).toFixed(2));
  row('fence right after a stop (as in a wake)', fmt(atWake));
  row('fence in the daemon, back to back', fmt(fenced));
  row('fence read alone (placed: one read by id)', fmt(reads));
} finally {
  for (const d of daemons) await d.stop();
  await pool.end();
  await pg.stop();
}
