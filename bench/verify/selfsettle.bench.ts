// Self-settlement benchmark (verify.x402.settlement "self") against anvil with the EIP-3009 test
// token, each figure beside a /healthz baseline from the same run. Per paid quick call (instant
// LLM): the server-side overhead = wall − /healthz − the time the chain and the LLM were busy
// with this call (the union of the intervals the RPC proxy and the LLM server — peers.mjs, a
// process of its own — spent on its requests, plus the wait from sending the transfer to the
// receipt poll that found it: block inclusion), and the settlement latency = from the last
// pass's answer to the paid answer (sign, send, receipt); and, free of scheduling noise on a busy
// host, the CPU the process spent per paid call beside per /healthz. Row 0: the facilitator path measured the
// same way; row 1: anvil mining a block per transaction; row 2: 2 s blocks like Base. Run: node --import tsx bench/verify/selfsettle.bench.ts [calls]

import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { rmSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { startTestDaemon } from '../../test/helpers/daemon.js';
import { Anvil } from '../../test/payments/fixtures/anvil.js';
import { encode, signPayment } from '../../test/payments/fixtures/payer.js';
import { call } from '../../test/verify/fixtures/client.js';
import { profiler } from './profile.js';

const N = Number(process.argv[2] ?? 100);
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const f = (n: number) => n.toFixed(2);
const now = () => performance.timeOrigin + performance.now();

type Interval = [number, number, string?];

/** Total length of the union of intervals clipped to [from, to]. */
function covered(xs: Interval[], from: number, to: number): number {
  const s = xs.map(([a, b]) => [Math.max(a, from), Math.min(b, to)] as Interval).filter(([a, b]) => b > a);
  s.sort((x, y) => x[0] - y[0]);
  let total = 0;
  let end = -Infinity;
  for (const [a, b] of s) {
    if (b <= end) continue;
    total += b - Math.max(a, end);
    end = b;
  }
  return total;
}

async function peers(rpc: string) {
  const child = spawn(process.execPath, [new URL('./peers.mjs', import.meta.url).pathname, rpc], { stdio: ['pipe', 'pipe', 'inherit'] });
  const line = await new Promise<string>((r) => createInterface({ input: child.stdout! }).once('line', r));
  const urls = JSON.parse(line) as { llm: string; rpc: string; fac: string };
  return {
    ...urls,
    async busy(): Promise<{ busy: Interval[]; lastLlm: number }> {
      return (await fetch(`${urls.rpc}/__busy`)).json() as Promise<{ busy: Interval[]; lastLlm: number }>;
    },
    stop: () => child.stdin!.end(),
  };
}

async function row(label: string, blockTime: number | undefined, calls: number, settlement: 'self' | 'facilitator' = 'self') {
  const anvil = await new Anvil(blockTime ? { blockTime } : {}).start();
  const p = await peers(anvil.url);
  const dir = mkdtempSync(join(tmpdir(), 'rbx-bench-'));
  let d: Awaited<ReturnType<typeof startTestDaemon>> | undefined;
  try {
    const token = await anvil.deployToken('USD Coin', '2');
    const gasKey = generatePrivateKey();
    await anvil.fund(privateKeyToAccount(gasKey).address, '10');
    writeFileSync(join(dir, 'gas.key'), gasKey, { mode: 0o600 });
    const payer = privateKeyToAccount(generatePrivateKey());
    await anvil.mint(token, payer.address, 10n ** 12n);
    d = await startTestDaemon({
      log: { level: 'error' },
      verify: {
        llm: { baseUrl: `${p.llm}/v1`, models: ['m0', 'm1', 'm2'], passTimeout: '10s' },
        x402: {
          payTo: privateKeyToAccount(generatePrivateKey()).address,
          network: 'custom',
          chainId: 31337,
          asset: token,
          assetName: 'USD Coin',
          assetVersion: '2',
          settlement,
          rpcUrl: p.rpc,
          facilitatorUrl: p.fac,
          gasKeyFile: join(dir, 'gas.key'),
          minGasBalance: '0.01',
          settleTimeout: '30s',
        },
      },
    });
    const port = d.http;
    const body = { artifact: 'def add(a, b): return a + b' };
    const unpaid = await call(port, 'POST', '/v1/verify/quick', { body });
    const terms = JSON.parse(Buffer.from(unpaid.headers['payment-required'], 'base64').toString()).accepts[0];
    const warm = 5;
    const payments = await Promise.all(Array.from({ length: calls + warm }, async () => encode(await signPayment(payer, terms))));
    for (let i = 0; i < warm; i++) await call(port, 'POST', '/v1/verify/quick', { body, headers: { 'x-payment': payments[calls + i] } });
    const health: number[] = [];
    const wall: number[] = [];
    const overhead: number[] = [];
    const upstream: number[] = [];
    const settle: number[] = [];
    const cpuHealth: number[] = [];
    const cpuPaid: number[] = [];
    const cpu = () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1000;
    };
    const prof = await profiler(label);
    for (let i = 0; i < calls; i++) {
      let c = cpu();
      let t = now();
      await call(port, 'GET', '/healthz');
      health.push(now() - t);
      cpuHealth.push(cpu() - c);
      await p.busy(); // clears (outside the CPU window: it is the bench's own request)
      c = cpu();
      t = now();
      const r = await call(port, 'POST', '/v1/verify/quick', { body, headers: { 'x-payment': payments[i] } });
      const end = now();
      if (r.status !== 200) throw new Error(`paid call answered ${r.status}: ${r.text}`);
      const s = JSON.parse(Buffer.from(r.headers['payment-response'], 'base64').toString());
      if (!s.success) throw new Error(`settlement ${JSON.stringify(s)}`);
      cpuPaid.push(cpu() - c);
      const { busy, lastLlm } = await p.busy();
      const sent = busy.find((b) => b[2] === 'send');
      const found = busy.find((b) => b[2] === 'receipt');
      if (sent && found && found[0] > sent[1]) busy.push([sent[1], found[0], 'inclusion']);
      const up = covered(busy, t, end);
      wall.push(end - t);
      upstream.push(up);
      overhead.push(end - t - up);
      settle.push(end - lastLlm);
    }
    await prof.stop(calls);
    // what the daemon spends anyway (timers, health checks) over a paid call's wall time: beside the 2 s blocks it is not small
    const idle: number[] = [];
    for (let i = 0; i < 3; i++) {
      const c = cpu();
      await new Promise((r) => setTimeout(r, pct(wall, 50)));
      idle.push(cpu() - c);
    }
    const h50 = pct(health, 50);
    console.log(`${label}, ${calls} paid quick calls`);
    console.log(`   /healthz p50 ${f(h50)} ms | paid call wall p50 ${f(pct(wall, 50))} ms (p90 ${f(pct(wall, 90))})`);
    console.log(`   chain (RPC requests + block inclusion) and LLM busy inside a call p50 ${f(pct(upstream, 50))} ms`);
    console.log(
      `   server-side overhead = wall - busy - /healthz: p50 ${f(pct(overhead, 50) - h50)} ms, p90 ${f(pct(overhead, 90) - h50)} ms (target <= 5 ms p50)`,
    );
    console.log(
      `   CPU of this process (daemon + its client; no waiting) per paid call p50 ${f(pct(cpuPaid, 50))} ms vs per /healthz ${f(pct(cpuHealth, 50))} ms → ${f(pct(cpuPaid, 50) - pct(cpuHealth, 50))} ms`,
    );
    console.log(`   CPU of the same process idle for a paid call's p50 wall time ${f(pct(idle, 50))} ms (spent anyway, not the call's)`);
    console.log(`   settlement latency (last pass answered → paid answer) p50 ${f(pct(settle, 50))} ms, p90 ${f(pct(settle, 90))} ms`);
  } finally {
    await d?.stop();
    p.stop();
    await anvil.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const rows = (process.env.BENCH_ROWS ?? '012').split('');
if (rows.includes('0')) await row('0. for comparison: facilitator settlement (an instant local facilitator), same method', undefined, N, 'facilitator');
if (rows.includes('1')) await row('1. self-settlement, anvil mining one block per transaction', undefined, N);
if (rows.includes('2')) await row('2. self-settlement, anvil with 2 s blocks (as Base)', 2, Math.max(5, Math.round(N / 10)));
