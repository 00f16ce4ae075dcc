// A plain HTTP proxy in front of the test's S3 server (a real Ceph RGW) that lets a test hold a
// chosen request of the daemon's store: the daemon's `checkpoints.s3.endpoint` is the proxy, which
// forwards every request byte for byte (SigV4 signs the Host header, which goes through as it
// came) until a rule matches — "PUT of a chunk, after k of them went through", "DELETE of a pending
// marker" — and then holds that request (and every later match) without an answer. The test knows
// the daemon is exactly there and SIGKILLs it: a kill at a point, not at a moment.

import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface StoreRequest {
  method: string;
  /** The blob key under the store's prefix ('' for a listing or a bucket request). */
  key: string;
}

interface Rule {
  match: (r: StoreRequest) => boolean;
  /** Matching requests still let through before the holding starts. */
  pass: number;
  hit: (r: StoreRequest) => void;
}

export class HoldProxy {
  private server?: Server;
  private rules: Rule[] = [];
  private held: IncomingMessage[] = [];
  url = '';

  /** `target`: the S3 endpoint (http://127.0.0.1:port); `base`: `/<bucket>/<prefix>/`. */
  constructor(
    private readonly target: string,
    private readonly base: string,
  ) {}

  async start(): Promise<void> {
    const up = new URL(this.target);
    this.server = createServer((req, res) => this.onRequest(req, res, up));
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private keyOf(url: string): string {
    const path = decodeURIComponent(url.split('?')[0]);
    return path.startsWith(this.base) ? path.slice(this.base.length) : '';
  }

  private onRequest(req: IncomingMessage, res: ServerResponse, up: URL): void {
    const r = { method: req.method ?? '', key: this.keyOf(req.url ?? '') };
    for (const rule of this.rules) {
      if (!rule.match(r)) continue;
      if (rule.pass > 0) {
        rule.pass--;
        continue;
      }
      this.held.push(req); // no answer: the daemon waits here until it is killed
      rule.hit(r);
      return;
    }
    const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: req.headers }, (ans) => {
      res.writeHead(ans.statusCode ?? 502, ans.headers);
      ans.pipe(res);
    });
    fwd.on('error', () => res.destroy());
    req.pipe(fwd);
  }

  /** Lets `pass` requests matching through, then holds the next one (and every later match);
   *  resolves with the first one held. */
  hold(match: (r: StoreRequest) => boolean, pass = 0): Promise<StoreRequest> {
    return new Promise((hit) => this.rules.push({ match, pass, hit }));
  }

  /** Drops every rule and every held request (their connections closed). */
  release(): void {
    this.rules = [];
    for (const req of this.held.splice(0)) req.socket.destroy();
  }

  async stop(): Promise<void> {
    this.release();
    this.server?.closeAllConnections();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}
