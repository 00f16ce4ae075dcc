// Benchmark peer: node:http answering the same 1 KiB page itself — no proxying at all. It is the
// floor of any proxy built on node's HTTP server: the CPU one request costs node before a single
// byte goes to an app. Usage: node bench/proxy/floor.ts → prints {"http": port}

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const page = Buffer.from('x'.repeat(1024));
const server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'text/html', 'content-length': page.length });
  res.end(page);
});
server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ http: (server.address() as AddressInfo).port }) + '\n'));
process.on('SIGTERM', () => process.exit(0));
