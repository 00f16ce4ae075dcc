// Benchmark prototype (not the product): an HTTP/1.1 proxy front that skips node's HTTP server —
// request heads parsed in JS from the client socket's bytes, forwarded with rootbox's own pool
// and response reader (src/proxy/pool.ts, src/h1/), the answer's head written by hand. Bodiless
// GET/HEAD only, one request at a time per connection. It shows what one event loop could reach
// without node:http's per-request objects (IncomingMessage, ServerResponse, their streams).
// Given cert and key it also listens over TLS. Usage: node --import tsx bench/proxy/raw.ts <app host> <app port> [cert key]

import { readFileSync } from 'node:fs';
import { STATUS_CODES } from 'node:http';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import { ResponseReader, requestHead, type ResponseHead } from '../../src/h1/index.js';
import { UpstreamPool, type Conn, type ConnOwner } from '../../src/proxy/pool.js';
import { Batch } from '../../src/proxy/batch.js';

const batch = new Batch();

const [host, port, cert, key] = [process.argv[2], Number(process.argv[3]), process.argv[4], process.argv[5]];
const upstream = { host, port };
const pool = new UpstreamPool({ maxSockets: 256, connectTimeout: 5000, activeTimeout: 60_000, idleTimeout: 4000 });
let rid = 0;

class Client implements ConnOwner {
  private pending: Buffer | undefined;
  private busy = false;
  private conn: Conn | undefined;
  private reader!: ResponseReader;
  private out: Buffer[] = [];
  private headText = '';

  constructor(private readonly sock: Socket) {
    sock.on('data', (d: Buffer) => this.onClientData(d));
    sock.on('error', () => {});
  }

  private onClientData(d: Buffer): void {
    this.pending = this.pending ? Buffer.concat([this.pending, d]) : d;
    if (!this.busy) this.next();
  }

  private next(): void {
    const buf = this.pending;
    if (!buf) return;
    const end = buf.indexOf('\r\n\r\n', 0, 'latin1');
    if (end < 0) return;
    this.pending = end + 4 < buf.length ? buf.subarray(end + 4) : undefined;
    const text = buf.toString('latin1', 0, end);
    let eol = text.indexOf('\r\n');
    if (eol < 0) eol = text.length;
    const [method, target] = text.slice(0, eol).split(' ');
    const raw: string[] = [];
    let h = '';
    while (eol < text.length) {
      const s = eol + 2;
      eol = text.indexOf('\r\n', s);
      if (eol < 0) eol = text.length;
      const c = text.indexOf(':', s);
      const name = text.slice(s, c);
      const value = text.slice(c + 1, eol).trim();
      if (name.length === 4 && name.toLowerCase() === 'host') h = value;
      raw.push(name, value);
    }
    this.busy = true;
    const wire = requestHead(method, target, h, raw, this.sock.remoteAddress ?? '', 'http', false);
    this.reader = new ResponseReader(this, method === 'HEAD');
    pool.acquire(upstream, false, '', (c: Conn) => {
      this.conn = c;
      c.owner = this;
      batch.holdWrites(c.sock);
      c.sock.write(wire, 'latin1');
    });
  }

  head(hd: ResponseHead): void {
    let s = `HTTP/1.1 ${hd.status} ${STATUS_CODES[hd.status] ?? ''}\r\n`;
    const l = hd.headers;
    for (let i = 0; i < l.length; i += 2) s += `${l[i]}: ${l[i + 1]}\r\n`;
    this.headText = `${s}x-request-id: r${rid++}\r\nconnection: keep-alive\r\n\r\n`;
  }

  data(chunk: Buffer): void {
    this.out.push(Buffer.from(chunk));
  }

  end(reusable: boolean): void {
    const c = this.conn!;
    this.conn = undefined;
    pool.release(c, reusable);
    batch.holdWrites(this.sock);
    this.sock.write(this.headText, 'latin1');
    for (const b of this.out) this.sock.write(b);
    this.out = [];
    this.busy = false;
    this.next();
  }

  onData(chunk: Buffer): void {
    this.reader.feed(chunk);
  }
  onDrain(): void {}
  onClose(): void {
    this.sock.destroy();
  }
  onError(): void {
    this.sock.destroy();
  }
  onTimeout(): void {
    this.sock.destroy();
  }
}

const listen = (s: Server) => new Promise<number>((r) => s.listen(0, '127.0.0.1', () => r((s.address() as AddressInfo).port)));
const plain = createServer({ noDelay: true }, (s) => new Client(s));
const secure = cert ? createTlsServer({ cert: readFileSync(cert), key: readFileSync(key) }, (s) => new Client(s)) : undefined;
process.stdout.write(JSON.stringify({ http: await listen(plain), https: secure ? await listen(secure) : 0 }) + '\n');
process.on('SIGTERM', () => process.exit(0));
