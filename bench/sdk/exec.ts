// bench/sdk/exec: what the TypeScript SDK (sdk/js) adds to an exec round trip (issue 39). One
// daemon (real runc), one awake server; each round times POST /servers/{id}/exec `true` through
// `server.exec('true')` and through bare `fetch` with the same body and key (each kept-alive),
// the order swapped every round. Prints p50/p90 of both and the SDK/fetch ratio of the p50s
// (goal ≤ 1.1), then create → first exec through the SDK (p50 of --creates runs, each server
// deleted after), beside E2B's published ~150 ms sandbox start.
//
// Usage: node --import tsx bench/sdk/exec.ts [--rounds 200] [--creates 5]

import { Rootbox } from '../../sdk/js/src/index.js';
import { startTestDaemon } from '../../test/helpers/daemon.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const ROUNDS = Number(arg('rounds', '200'));
const CREATES = Number(arg('creates', '5'));
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const f1 = (n: number) => n.toFixed(1);

const d = await startTestDaemon({
  hosting: { anonServersPerIp: 100, rateLimit: { perIpPerMinute: 100_000, perKeyPerMinute: 100_000, createsPerIpPerHour: 1000 } },
  proxy: { idleTimeout: '1h' },
});
try {
  const base = `http://api.localhost:${d.http}`;
  const rb = new Rootbox({ baseUrl: base });
  const server = await rb.create();
  const url = `${base}/servers/${server.id}/exec`;
  const body = JSON.stringify({ command: 'true' });
  const headers = { authorization: `Bearer ${rb.apiKey}`, 'content-type': 'application/json' };
  const viaSdk = async () => {
    const t0 = performance.now();
    const r = await server.exec('true');
    if (r.exitCode !== 0) throw new Error(JSON.stringify(r));
    return performance.now() - t0;
  };
  const viaFetch = async () => {
    const t0 = performance.now();
    const r = await fetch(url, { method: 'POST', headers, body });
    const j = (await r.json()) as { exit_code: number };
    if (j.exit_code !== 0) throw new Error(JSON.stringify(j));
    return performance.now() - t0;
  };
  for (let i = 0; i < 10; i++) (await viaSdk(), await viaFetch()); // warm both connections
  const sdk: number[] = [];
  const bare: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    if (i % 2) (sdk.push(await viaSdk()), bare.push(await viaFetch()));
    else (bare.push(await viaFetch()), sdk.push(await viaSdk()));
  }
  const ratio = pct(sdk, 50) / pct(bare, 50);
  console.log(`exec \`true\` round trip, ${ROUNDS} rounds (ms)`);
  console.log(`  sdk    p50 ${f1(pct(sdk, 50))}  p90 ${f1(pct(sdk, 90))}`);
  console.log(`  fetch  p50 ${f1(pct(bare, 50))}  p90 ${f1(pct(bare, 90))}`);
  console.log(`  sdk/fetch p50 ratio ${ratio.toFixed(3)} (goal ≤ 1.1: ${ratio <= 1.1 ? 'met' : 'NOT met'})`);
  await server.delete();

  const firsts: number[] = [];
  for (let i = 0; i < CREATES; i++) {
    const t0 = performance.now();
    const s = await rb.create();
    await s.exec('true');
    firsts.push(performance.now() - t0);
    await s.delete();
  }
  console.log(
    `create → first exec through the SDK, ${CREATES} runs: p50 ${f1(pct(firsts, 50))} ms, max ${f1(Math.max(...firsts))} ms (E2B publishes ~150 ms sandbox start)`,
  );
  rb.close();
} finally {
  await d.stop();
}
process.exit(0);
