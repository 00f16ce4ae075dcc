// Benchmark of the verification service, each figure beside a /healthz baseline from the same
// run: (1) server-side overhead of a paid quick call with an instant LLM and facilitator,
// (2) wall time of a deep call against its slowest pass, (3) unpaid 402 answers per second
// (load from a separate process). The LLM provider and the facilitator answer at once from a
// process of their own (upstreams.mjs), so their work is not counted as the daemon's. With --registry, (1) also runs against a second daemon in
// cluster mode (a real PostgreSQL registry started here: every payment locked there too) in
// alternating calls, and prints what the registry adds to the paid call.
// Run: node --import tsx bench/verify/verify.bench.ts [--registry]

import { spawn } from 'node:child_process';
import { RegistryPool } from '../../src/registry/index.js';
import { startTestDaemon, type TestDaemon } from '../../test/helpers/daemon.js';
import { startPostgres, type TestPostgres } from '../../test/helpers/postgres.js';
import { encode, newPayer, signPayment } from '../../test/payments/fixtures/payer.js';
import { call } from '../../test/verify/fixtures/client.js';
import { initRegistry } from '../../test/helpers/cluster.js';
import { profiler } from './profile.js';

const PAY_TO = '0x' + '3c'.repeat(20);
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const f = (n: number) => n.toFixed(2);

/** The LLM provider and the facilitator, instant, in their own process (upstreams.mjs). */
const upstreams = spawn(process.execPath, [new URL('./upstreams.mjs', import.meta.url).pathname], { stdio: ['pipe', 'pipe', 'inherit'] });
const urls: { llm: string; fac: string } = await new Promise((resolve, reject) => {
  let out = '';
  upstreams.stdout!.on('data', (c) => {
    out += c;
    if (out.includes('\n')) resolve(JSON.parse(out));
  });
  upstreams.on('exit', () => reject(new Error('upstreams.mjs ended')));
});
const llm = { url: urls.llm };
const fac = { url: urls.fac };
const setDelays = (d: Record<string, number>) => fetch(`${llm.url}/__delay`, { method: 'POST', body: JSON.stringify(d) }).then((r) => r.text());
const models = Array.from({ length: 10 }, (_, i) => `m${i}`);
const verifyCfg = { llm: { baseUrl: `${llm.url}/v1`, models, passTimeout: '10s' }, x402: { payTo: PAY_TO, facilitatorUrl: fac.url } };
const d = await startTestDaemon({ log: { level: 'error' }, verify: verifyCfg });
let pg: TestPostgres | undefined;
let r: TestDaemon | undefined;
if (process.argv.includes('--registry')) {
  pg = await startPostgres();
  const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(pool);
  await pool.end();
  r = await startTestDaemon({ log: { level: 'error' }, verify: verifyCfg, cluster: { registry: pg.url, host: 'bench' } });
}

async function timed(fn: () => Promise<{ status: number }>, expect: number): Promise<number> {
  const t = performance.now();
  const r = await fn();
  const ms = performance.now() - t;
  if (r.status !== expect) throw new Error(`expected ${expect}, got ${r.status}`);
  return ms;
}

try {
  const port = d.http;
  const payer = newPayer();
  const unpaid = await call(port, 'POST', '/v1/verify/quick', { body: { artifact: 'x' } });
  const terms = JSON.parse(Buffer.from(unpaid.headers['payment-required'], 'base64').toString()).accepts[0];
  const N = 200;
  const payments = await Promise.all(Array.from({ length: N + 20 }, async () => encode(await signPayment(payer, terms))));
  const regPayments = r ? await Promise.all(Array.from({ length: N + 20 }, async () => encode(await signPayment(payer, terms)))) : [];
  const healthReg: number[] = [];
  const paidReg: number[] = [];
  const body = { artifact: 'def add(a, b): return a + b' };

  // Peers measured in the same run: /healthz, one direct LLM round trip, one facilitator round trip.
  const health: number[] = [];
  const paid: number[] = [];
  const llmRt: number[] = [];
  const facRt: number[] = [];
  for (let i = 0; i < 20; i++) await call(port, 'POST', '/v1/verify/quick', { body, headers: { 'x-payment': payments[N + i] } }); // warm-up
  if (r) for (let i = 0; i < 20; i++) await call(r.http, 'POST', '/v1/verify/quick', { body, headers: { 'x-payment': regPayments[N + i] } });
  const prof = await profiler('verify-paid');
  for (let i = 0; i < N; i++) {
    if (r) {
      const rp = r.http;
      healthReg.push(await timed(() => call(rp, 'GET', '/healthz'), 200));
      paidReg.push(await timed(() => call(rp, 'POST', '/v1/verify/quick', { body, headers: { 'x-payment': regPayments[i] } }), 200));
    }
    health.push(await timed(() => call(port, 'GET', '/healthz'), 200));
    paid.push(await timed(() => call(port, 'POST', '/v1/verify/quick', { body, headers: { 'x-payment': payments[i] } }), 200));
    llmRt.push(
      await timed(
        () => fetch(`${llm.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ model: 'm0' }) }).then(async (r) => (await r.text(), r)),
        200,
      ),
    );
    facRt.push(
      await timed(
        () =>
          fetch(`${fac.url}/verify`, { method: 'POST', body: JSON.stringify({ paymentPayload: { payload: { authorization: { from: '0x' } } } }) }).then(
            async (r) => (await r.text(), r),
          ),
        200,
      ),
    );
  }
  await prof.stop(N);
  const h50 = pct(health, 50);
  const p50 = pct(paid, 50);
  const upstream = pct(llmRt, 50) + 2 * pct(facRt, 50);
  console.log('1. paid quick call (instant LLM and facilitator), p50 over', N);
  console.log(`   /healthz p50 ${f(h50)} ms | paid call p50 ${f(p50)} ms (p90 ${f(pct(paid, 90))}) | ratio ${f(p50 / h50)}x`);
  console.log(`   upstream round trips inside a paid call (1 LLM, concurrent x3 + verify + settle): ~${f(upstream)} ms`);
  console.log(`   server-side overhead = paid - healthz - upstream = ${f(p50 - h50 - upstream)} ms p50 (goal <= 2 ms)`);
  if (r) {
    const added = pct(paidReg, 50) - pct(healthReg, 50) - (p50 - h50);
    console.log(
      `   registry mode (calls alternating with the above): /healthz p50 ${f(pct(healthReg, 50))} ms | paid call p50 ${f(pct(paidReg, 50))} ms (p90 ${f(pct(paidReg, 90))})`,
    );
    console.log(`   the registry adds ${f(added)} ms p50 to a paid call's overhead (target <= +2 ms)`);
  }

  // 2. Deep call wall time against its slowest pass.
  const slowest = 300;
  await setDelays({ m9: slowest, '*': 100 });
  const pay = await Promise.all(Array.from({ length: 10 }, async () => encode(await signPayment(payer, { ...terms, amount: '200000' }))));
  const deep: number[] = [];
  for (const p of pay) deep.push(await timed(() => call(port, 'POST', '/v1/verify/deep', { body, headers: { 'x-payment': p } }), 200));
  await setDelays({});
  console.log(`2. deep call (10 passes; 9 take 100 ms, the slowest ${slowest} ms), 10 calls`);
  console.log(`   wall p50 ${f(pct(deep, 50))} ms vs slowest pass ${slowest} ms → ${f(pct(deep, 50) / slowest)}x (target <= 1.2x); /healthz p50 ${f(h50)} ms`);

  // 3. Unpaid 402 throughput vs /healthz throughput, load from another process.
  const load = (method: string, path: string, b: string) =>
    new Promise<{ perSecond: number; statuses: Record<string, number> }>((resolve, reject) => {
      const c = spawn(process.execPath, [new URL('./load.mjs', import.meta.url).pathname, String(port), 'verify.localhost', method, path, b, '32', '4000']);
      let out = '';
      c.stdout.on('data', (x) => (out += x));
      c.on('close', () => (out ? resolve(JSON.parse(out)) : reject(new Error('load failed'))));
    });
  const hz = await load('GET', '/healthz', '-');
  const un = await load('POST', '/v1/verify/quick', JSON.stringify(body));
  console.log('3. throughput, 32 keep-alive connections for 4 s from a separate process');
  console.log(
    `   /healthz ${hz.perSecond}/s ${JSON.stringify(hz.statuses)} | unpaid 402 ${un.perSecond}/s ${JSON.stringify(un.statuses)} | ratio ${f(un.perSecond / hz.perSecond)} (target >= 5000/s)`,
  );
} finally {
  await d.stop();
  await r?.stop();
  await pg?.stop();
  upstreams.stdin!.end();
}
