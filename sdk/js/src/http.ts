// The SDK's one way to the API: node:http(s) with a kept-alive agent (no client-side timeouts,
// so an exec may run as long as the API lets it), the api_key as a Bearer token, answers other
// than 2xx turned into RootboxError. Retries only where the API says a retry may succeed: a 429
// (refused before any work) or a 503 on an idempotent call (GET, PUT, DELETE), each with a
// Retry-After no longer than `maxRetryWait`, at most `maxRetries` times; a body that is a stream
// is never sent twice.

import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { Readable } from 'node:stream';
import { errorOf, RootboxError } from './errors.js';

export type Body = string | Uint8Array | Readable;

export interface TransportOptions {
  baseUrl: string;
  apiKey?: string;
  /** PEM of a CA to trust beside the system's (a host with its own local CA). */
  ca?: string | Buffer;
  maxRetries?: number;
  /** Longest Retry-After (seconds) the SDK waits itself; a longer one is thrown to the caller. */
  maxRetryWait?: number;
}

export interface Call {
  query?: Record<string, string | number | boolean | undefined>;
  json?: unknown;
  body?: Body;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Send no Authorization even when a key is set. */
  anonymous?: boolean;
}

const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE']);
const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(t), reject(signal.reason)), { once: true });
  });

export class Transport {
  readonly base: URL;
  apiKey?: string;
  readonly ca?: string | Buffer;
  private readonly agent: HttpAgent;
  private readonly maxRetries: number;
  private readonly maxRetryWait: number;

  constructor(o: TransportOptions) {
    this.base = new URL(o.baseUrl.endsWith('/') ? o.baseUrl : `${o.baseUrl}/`);
    if (this.base.protocol !== 'http:' && this.base.protocol !== 'https:') throw new TypeError(`baseUrl must be http(s): ${o.baseUrl}`);
    this.apiKey = o.apiKey;
    this.ca = o.ca;
    this.maxRetries = o.maxRetries ?? 2;
    this.maxRetryWait = o.maxRetryWait ?? 30;
    this.agent = this.base.protocol === 'https:' ? new HttpsAgent({ keepAlive: true, ca: o.ca }) : new HttpAgent({ keepAlive: true });
  }

  /** The URL of `path` (relative to the base) with `query`. */
  url(path: string, query?: Call['query']): URL {
    const u = new URL(path.replace(/^\//, ''), this.base);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== false) u.searchParams.set(k, v === true ? '1' : String(v));
    return u;
  }

  /** The answer of a 2xx, its body not read yet; anything else thrown as RootboxError. */
  async open(method: string, path: string, c: Call = {}): Promise<IncomingMessage> {
    const replayable = !(c.body && typeof c.body === 'object' && 'pipe' in c.body);
    for (let attempt = 0; ; attempt++) {
      const res = await this.once(method, path, c);
      const status = res.statusCode ?? 0;
      if (status >= 200 && status < 300) return res;
      const err = errorOf(status, (await readAll(res)).toString('utf8'), res.headers);
      const retryable = status === 429 || (status === 503 && IDEMPOTENT.has(method));
      const wait = err.retryAfter;
      if (!retryable || !replayable || wait === undefined || wait > this.maxRetryWait || attempt >= this.maxRetries) throw err;
      await sleep(wait * 1000, c.signal);
    }
  }

  /** A JSON answer, its keys as sent. */
  async json<T = Record<string, unknown>>(method: string, path: string, c: Call = {}): Promise<T> {
    const res = await this.open(method, path, c);
    const text = (await readAll(res, c.signal)).toString('utf8');
    return (text ? JSON.parse(text) : {}) as T;
  }

  private once(method: string, path: string, c: Call): Promise<IncomingMessage> {
    const u = this.url(path, c.query);
    const headers: Record<string, string> = { accept: 'application/json', ...c.headers };
    if (this.apiKey && !c.anonymous) headers.authorization = `Bearer ${this.apiKey}`;
    let payload: string | Uint8Array | Readable | undefined = c.body;
    if (c.json !== undefined) {
      payload = JSON.stringify(c.json);
      headers['content-type'] = 'application/json';
    }
    if (typeof payload === 'string') payload = Buffer.from(payload);
    if (payload instanceof Uint8Array) headers['content-length'] = String(payload.byteLength);
    else if (payload === undefined && method !== 'GET' && method !== 'HEAD') headers['content-length'] = '0';
    const send = u.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = send(u, { method, headers, agent: this.agent, signal: c.signal }, resolve);
      req.on('error', (e: NodeJS.ErrnoException) =>
        reject(
          e.name === 'AbortError' ? e : new RootboxError({ status: 0, code: 'connection_failed', detail: `${method} ${u.origin}: ${e.message}`, cause: e }),
        ),
      );
      if (payload === undefined || payload instanceof Uint8Array) req.end(payload);
      else payload.on('error', (e) => req.destroy(e)).pipe(req);
    });
  }

  /** Closes the kept-alive connections. */
  close(): void {
    this.agent.destroy();
  }
}

/** The error of an answer whose connection closed before its end. */
export const cutOff = () => new RootboxError({ status: 0, code: 'connection_failed', detail: 'the answer was cut off' });

/** A body read whole. */
export function readAll(res: IncomingMessage, signal?: AbortSignal): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    res.on('data', (c: Buffer) => parts.push(c));
    res.on('end', () => resolve(parts.length === 1 ? parts[0] : Buffer.concat(parts)));
    res.on('error', reject);
    // closed without its end: cut off, or the caller's signal aborted it (then its error came first)
    res.on('close', () => res.complete || reject(signal?.aborted ? signal.reason : cutOff()));
  });
}
