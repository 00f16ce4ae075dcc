// POST /create → 200 latency and sustained creates per second, beside the bare runtime create
// (the same runc path without the API, accounts, keys and slugs) measured in the same run.
// Usage: node --import tsx bench/create/create.bench.ts [count=50]
import { request } from 'node:http';
import { startTestDaemon } from '../../test/helpers/daemon.js';

const N = Number(process.argv[2] ?? 50);
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const fmt = (xs: number[]) =>
  `p50 ${pct(xs, 50).toFixed(1)} ms  p90 ${pct(xs, 90).toFixed(1)} ms  min ${Math.min(...xs).toFixed(1)}  max ${Math.max(...xs).toFixed(1)}`;

const d = await startTestDaemon({
  publicIp: '127.0.0.1',
  runtime: { uidStart: 3_500_000_000, uidRanges: 300 },
  hosting: { anonServersPerIp: 1000, maxServersPerAccount: 10_000, rateLimit: { createsPerIpPerHour: 100_000, perIpPerMinute: 100_000 } },
});
function post(path: string, key?: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: d.http, path, method: 'POST', headers: { host: 'api.localhost', ...(key ? { authorization: `Bearer ${key}` } : {}) } },
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
try {
  const first = await post('/create');
  const key = first.body.api_key as string;
  const api: number[] = [];
  for (let i = 0; i < N; i++) {
    const t = performance.now();
    const r = await post('/create', key);
    api.push(performance.now() - t);
    if (r.status !== 200) throw new Error(`create failed: ${JSON.stringify(r.body)}`);
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
        const r = await post('/create', key);
        if (r.status !== 200) throw new Error(`create failed: ${JSON.stringify(r.body)}`);
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  console.log(`POST /create → 200 (${N} sequential): ${fmt(api)}`);
  console.log(`bare runtime.create (${bare.length}):       ${fmt(bare)}`);
  console.log(`API / bare p50 ratio: ${(pct(api, 50) / pct(bare, 50)).toFixed(2)}x   (target: POST /create p50 <= 300 ms)`);
  console.log(`sustained: ${N} creates with 4 clients in ${secs.toFixed(1)} s = ${(N / secs).toFixed(1)} creates/s`);
} finally {
  await d.stop();
}
