// Benchmark peer: http-proxy-3 alone on node:http with a keep-alive agent — no edge, no host
// dispatch, no header policy, no wake logic. It shows what the library and node's HTTP stack
// cost by themselves, so bench/proxy can tell rootbox's own overhead from theirs.
// Usage: node --import tsx bench/proxy/plain.ts <app host> <app port>  → prints {"http": port}

import { Agent, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ProxyServer } from 'http-proxy-3';

const [host, port] = [process.argv[2], Number(process.argv[3])];
const agent = new Agent({ keepAlive: true, maxSockets: 256 });
const proxy = new ProxyServer({ agent, target: { host, port, protocol: 'http:' }, toProxy: true });
proxy.on('error', (_e, _req, res) => (res as { destroy(): void }).destroy());
const server = createServer((req, res) => proxy.web(req, res));
server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ http: (server.address() as AddressInfo).port }) + '\n'));
process.on('SIGTERM', () => process.exit(0));
