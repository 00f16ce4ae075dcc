// Benchmark peer: node:http answering the same 1 KiB page itself — no proxying at all. It is the
// floor of any proxy built on node's HTTP server: the CPU one request costs node before a single
// byte goes to an app. Given a certificate and key, it also answers over TLS the way the edge
// listens (an HTTP/2 secure server taking HTTP/1.1 too), the floor of the TLS rows.
// Usage: node bench/proxy/floor.ts [cert.pem key.pem] → prints {"http": port, "https": port}

import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createSecureServer } from 'node:http2';
import type { AddressInfo, Server } from 'node:net';

const page = Buffer.from('x'.repeat(1024));
const answer = (_req: IncomingMessage, res: ServerResponse) => {
  res.writeHead(200, { 'content-type': 'text/html', 'content-length': page.length });
  res.end(page);
};
const listen = (s: Server) => new Promise<number>((r) => s.listen(0, '127.0.0.1', () => r((s.address() as AddressInfo).port)));
const server = createServer(answer);
const [cert, key] = process.argv.slice(2);
const secure = cert ? createSecureServer({ allowHTTP1: true, cert: readFileSync(cert), key: readFileSync(key) }, answer as never) : undefined;
const ports = { http: await listen(server), https: secure ? await listen(secure as unknown as Server) : 0 };
process.stdout.write(JSON.stringify(ports) + '\n');
process.on('SIGTERM', () => process.exit(0));
