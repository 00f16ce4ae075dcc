// Benchmark peer: node:http with an undici Pool as the forwarder (undici 7, a dev dependency used
// by this bench only) — no edge, no policy, the same X-Forwarded-* headers the proxy adds. Beside
// `fwd.ts` (rootbox's own forwarder on the same node:http server) it compares the two forwarders.
// Usage: node --import tsx bench/proxy/undici.ts <app host> <app port>  → prints {"http": port}

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';

const [host, port] = [process.argv[2], Number(process.argv[3])];
const pool = new Pool(`http://${host}:${port}`, { connections: 256, pipelining: 1, keepAliveTimeout: 4000 });
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer', 'host']);

function forward(req: IncomingMessage, res: ServerResponse): void {
  const headers: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) if (!HOP.has(raw[i].toLowerCase())) headers.push(raw[i], raw[i + 1]);
  const h = req.headers.host ?? '';
  const ip = req.socket.remoteAddress ?? '';
  headers.push('host', h, 'x-forwarded-for', ip, 'x-real-ip', ip, 'x-forwarded-proto', 'http', 'x-forwarded-host', h);
  const bodiless = req.method === 'GET' || req.method === 'HEAD';
  // dispatch with a raw handler: no Readable per answer, the head written as the app sent it
  pool.dispatch(
    { path: req.url ?? '/', method: req.method as 'GET', headers, body: bodiless ? null : req },
    {
      onRequestStart() {},
      onResponseStart(_c, status, hdrs) {
        const out: string[] = [];
        for (const k in hdrs) if (!HOP.has(k)) out.push(k, String(hdrs[k]));
        res.writeHead(status, out as never);
      },
      onResponseData(_c, chunk) {
        res.write(chunk);
      },
      onResponseEnd() {
        res.end();
      },
      onResponseError(_c, err) {
        if (res.headersSent) res.destroy();
        else res.writeHead(502).end(String((err as Error).message));
      },
    },
  );
}

const server = createServer(forward);
server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ http: (server.address() as AddressInfo).port }) + '\n'));
process.on('SIGTERM', () => process.exit(0));
