// Benchmark peer: rootbox's own forwarder (src/proxy/forward.ts: pooled HTTP/1.1 client, header
// policy, batched writes) on a bare node:http server — no edge (admission, host dispatch, request
// ids, metrics), no site lookup, no wake logic, no egress meter. Beside `undici.ts` it compares
// the two forwarders; beside the rootbox row it shows what the edge and the proxy app add.
// Usage: node --import tsx bench/proxy/fwd.ts <app host> <app port>  → prints {"http": port}

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLogger } from '../../src/log/index.js';
import { Forwarder } from '../../src/proxy/forward.js';

const [host, port] = [process.argv[2], Number(process.argv[3])];
const fwd = new Forwarder({ connectTimeout: 5000, upstreamTimeout: 60_000, maxSockets: 256, log: createLogger({ level: 'error' }) });
const upstream = { host, port };
let n = 0;
const server = createServer((req, res) => {
  const info = { host: 'bench.rbx.test', scheme: 'http' as const, requestId: `r${n++}`, ip: req.socket.remoteAddress ?? '' };
  fwd.web(req, res, upstream, info, { serverId: 'srv_bench' });
});
server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ http: (server.address() as AddressInfo).port }) + '\n'));
process.on('SIGTERM', () => process.exit(0));
