// POST /create → 200 latency and sustained creates per second, beside the bare runtime create
// (the same runc path without the API, accounts, keys and slugs) measured in the same run.
// With --registry, a second daemon in cluster mode (a real PostgreSQL registry started here:
// slug claims and placements there) is measured in alternating rounds beside the LMDB-only one.
// Usage: node --import tsx bench/create/create.bench.ts [count=50] [--registry]
import { request } from 'node:http';
import { RegistryPool } from '../../src/registry/index.js';
import { startTestDaemon, type TestDaemon } from '../../test/helpers/daemon.js';
import { startPostgres, type TestPostgres } from '../../test/helpers/postgres.js';
import { initRegistry } from '../../test/helpers/cluster.js';

const N = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 50);
const withRegistry = process.argv.includes('--registry');
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const fmt = (xs: number[]) =>
  `p50 ${pct(xs, 50).toFixed(1)} ms  p90 ${pct(xs, 90).toFixed(1)} ms  min ${Math.min(...xs).toFixed(1)}  max ${Math.max(...xs).toFixed(1)}`;
const opts = (uidStart: number) => ({
  publicIp: '127.0.0.1',
  runtime: { uidStart, uidRanges: 300 },
  hosting: { anonServersPerIp: 1000, maxServersPerAccount: 10_000, rateLimit: { createsPerIpPerHour: 100_000, perIpPerMinute: 100_000 } },
});

const d = await startTestDaemon(opts(3_500_000_000));
let pg: TestPostgres | undefined;
let r: TestDaemon | undefined;
function post(port: number, path: string, key?: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path, method: 'POST', headers: { host: 'api.localhost', ...(key ? { authorization: `Bearer ${key}` } : {}) } },
      (res) => {
        let s = '';
        res.on('data', (c) => (s += c));
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(s) }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}
async function timedCreate(port: number, key: string, into: number[]): Promise<void> {
  const t = performance.now();
  const res = await post(port, '/create', key);
  into.push(performance.now() - t);
  if (res.status !== 200) throw new Error(`create failed: ${JSON.stringify(res.body)}`);
}
try {
  if (withRegistry) {
    pg = await startPostgres();
    const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
    await initRegistry(pool);
    await pool.end();
    r = await startTestDaemon({ ...opts(3_300_000_000), cluster: { registry: pg.url, host: 'bench' } });
  }
  const key = (await post(d.http, '/create')).body.api_key as string;
  const rkey = r ? ((await post(r.http, '/create')).body.api_key as string) : '';
  const api: number[] = [];
  const reg: number[] = [];
  for (let i = 0; i < N; i++) {
    await timedCreate(d.http, key, api);
    if (r) await timedCreate(r.http, rkey, reg);
  }
  const bare: number[] = [];
  for (let i = 0; i < Math.min(N, 20); i++) {
    const id = `srv_bench${i.toString(16).padStart(4, '0')}`;
    const t = performance.now();
    await d.daemon.runtime.create({ id, slug: `bench-${i}`, memoryBytes: 256 << 20, diskBytes: 256 << 20 });
    bare.push(performance.now() - t);
  }
  for (const s of d.daemon.runtime.list()) await d.daemon.runtime.delete(s.id);
  const t0 = performance.now();
  let done = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (done < N) {
        done++;
        const res = await post(d.http, '/create', key);
        if (res.status !== 200) throw new Error(`create failed: ${JSON.stringify(res.body)}`);
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  console.log(`POST /create → 200 (${N} sequential): ${fmt(api)}`);
  if (r) console.log(`POST /create, registry mode (${N}, rounds alternating with the row above): ${fmt(reg)}`);
  console.log(`bare runtime.create (${bare.length}):       ${fmt(bare)}`);
  console.log(`API / bare p50 ratio: ${(pct(api, 50) / pct(bare, 50)).toFixed(2)}x   (target: POST /create p50 <= 300 ms)`);
  if (r) console.log(`registry / LMDB p50 ratio: ${(pct(reg, 50) / pct(api, 50)).toFixed(2)}x   (target <= 1.3x)`);
  console.log(`sustained: ${N} creates with 4 clients in ${secs.toFixed(1)} s = ${(N / secs).toFixed(1)} creates/s`);
} finally {
  await d.stop();
  await r?.stop();
  await pg?.stop();
}
