// bench/api/forwarded: the cost of reaching a server's API through another host (issue 29 item
// 2), in one run: two daemons (real runc, a real PostgreSQL registry, the mutual-TLS channel),
// one awake server on A; for each call, each round times it through A's own API edge and through
// B's (client → B's API → channel → A's API app), the order swapped every round, on one kept-alive
// client connection per edge: GET /servers/{id} (no container work), POST /servers/{id}/exec
// `true`, and a 4 MiB file read (GET /servers/{id}/files). Prints p50/p90 of each row, the
// forwarded/direct ratio of the p50s and the added ms.
//
// Usage: node --import tsx bench/api/forwarded.ts [--rounds 40]

import { randomBytes } from 'node:crypto';
import { Agent, request } from 'node:http';
import type { TestDaemon } from '../../test/helpers/daemon.js';
import { api, startClusterRegistry, startHost } from '../../test/registry/fixtures/twohosts.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const ROUNDS = Number(arg('rounds', '40'));
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

const fast = { hosting: { rateLimit: { perIpPerMinute: 100_000, perKeyPerMinute: 100_000, createsPerIpPerHour: 100 } }, proxy: { idleTimeout: '1h' } };
const pg = await startClusterRegistry();
const hosts: TestDaemon[] = [];
try {
  const a = await startHost(pg, 'host-a', fast);
  hosts.push(a);
  const b = await startHost(pg, 'host-b', fast);
  hosts.push(b);
  const made = await api(a, 'POST', '/create', {});
  if (made.status !== 200) throw new Error(`create: ${made.text}`);
  const { id, api_key: key } = made.json as { id: string; api_key: string };
  const agents = new Map([a, b].map((d) => [d, new Agent({ keepAlive: true, maxSockets: 1 })]));

  const call = (d: TestDaemon, method: string, path: string, body?: Buffer): Promise<{ status: number; bytes: number; ms: number }> => {
    const t0 = performance.now();
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: d.http,
          method,
          path,
          agent: agents.get(d),
          headers: {
            host: 'api.localhost',
            authorization: `Bearer ${key}`,
            ...(body ? { 'content-type': 'application/json', 'content-length': String(body.length) } : {}),
          },
        },
        (res) => {
          let bytes = 0;
          res.on('data', (c: Buffer) => (bytes += c.length));
          res.on('end', () => resolve({ status: res.statusCode!, bytes, ms: performance.now() - t0 }));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  };

  const blob = randomBytes(4 * 1024 * 1024);
  const put = await call(a, 'PUT', `/servers/${id}/files?path=/root/blob.bin`, blob);
  if (put.status !== 200) throw new Error(`upload: ${put.status}`);
  const exec = Buffer.from(JSON.stringify({ command: ['true'] }));
  const cases: [string, (d: TestDaemon) => ReturnType<typeof call>, number][] = [
    ['GET /servers/{id}', (d) => call(d, 'GET', `/servers/${id}`), 0],
    ['POST /servers/{id}/exec true', (d) => call(d, 'POST', `/servers/${id}/exec`, exec), 0],
    ['GET 4 MiB file', (d) => call(d, 'GET', `/servers/${id}/files?path=/root/blob.bin`), blob.length],
  ];
  // warm both edges, the channel session and the server
  for (const [, f] of cases) for (const d of [a, b]) await f(d);
  const times = new Map<string, number[]>();
  for (const [label, f, size] of cases) {
    for (let r = 0; r < ROUNDS; r++) {
      for (const [d, via] of r % 2
        ? ([
            [b, 'B'],
            [a, 'A'],
          ] as const)
        : ([
            [a, 'A'],
            [b, 'B'],
          ] as const)) {
        const got = await f(d);
        if (got.status !== 200 || (size && got.bytes !== size)) throw new Error(`${label} via ${via}: ${got.status}, ${got.bytes} bytes`);
        const k = `${label}|${via}`;
        times.set(k, [...(times.get(k) ?? []), got.ms]);
      }
    }
  }
  console.log(`bench/api/forwarded: ${ROUNDS} rounds, one kept-alive connection per edge, A runs the server`);
  for (const [label] of cases) {
    const direct = times.get(`${label}|A`)!;
    const fwd = times.get(`${label}|B`)!;
    const [d50, f50] = [pct(direct, 50), pct(fwd, 50)];
    console.log(
      `${label.padEnd(30)} direct (A) p50 ${d50.toFixed(2).padStart(7)} ms p90 ${pct(direct, 90).toFixed(2).padStart(7)} ms   ` +
        `through B p50 ${f50.toFixed(2).padStart(7)} ms p90 ${pct(fwd, 90).toFixed(2).padStart(7)} ms   ` +
        `ratio ${(f50 / d50).toFixed(2)}×  added ${(f50 - d50 >= 0 ? '+' : '') + (f50 - d50).toFixed(2)} ms`,
    );
  }
  for (const ag of agents.values()) ag.destroy();
} finally {
  for (const d of hosts.reverse()) await d.stop().catch(() => {});
  await pg.stop();
}
