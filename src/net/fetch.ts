// A lean fetch for the daemon's outside calls on the paid path (LLM passes, JSON-RPC, the x402
// facilitator): node:http(s) over kept-alive agents, the answer read whole into a WHATWG Response
// (a BufferedResponse, response.ts: its readers take the bytes without a stream).
// It does about half the CPU of the global (undici) fetch per request — no WHATWG request
// streams, no body tee — and behaves alike where our clients look: redirects followed (303, and
// 301/302 after POST, become GET), the signal's reason as the rejection on abort, TypeError
// 'fetch failed' with the cause when the connection fails, gzip/deflate/br bodies decoded — on
// libuv's thread pool (async zlib), never on the event loop, and bounded by MAX_DECODED_BYTES of
// output (a small compressed answer can expand to gigabytes): a larger one fails the request with
// TypeError('fetch failed', {cause: DecodedTooLarge}), which each client maps to its usual upstream error.
// Anything it does not handle (stream or form bodies, redirect modes other than follow) goes to
// the global fetch. leanPost is the same request without the WHATWG Response (status and body
// bytes, a deadline of its own) for callers that read JSON directly (JSON-RPC).

import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { promisify } from 'node:util';
import { brotliDecompress, gunzip, inflate } from 'node:zlib';
import { BufferedResponse } from './response.js';

const httpAgent = new HttpAgent({ keepAlive: true, keepAliveMsecs: 1000, maxSockets: 256, maxFreeSockets: 64, timeout: 120_000 });
const httpsAgent = new HttpsAgent({ keepAlive: true, keepAliveMsecs: 1000, maxSockets: 256, maxFreeSockets: 64, timeout: 120_000 });

/** Largest answer read (bytes on the wire); a larger one fails the request. */
export const MAX_ANSWER_BYTES = 32 * 1024 * 1024;
/** Largest decoded (decompressed) answer; a larger one fails the request. */
export const MAX_DECODED_BYTES = 32 * 1024 * 1024;

/** A compressed answer that expands beyond MAX_DECODED_BYTES. */
export class DecodedTooLarge extends Error {
  constructor(encoding: string) {
    super(`the ${encoding} answer expands beyond ${MAX_DECODED_BYTES} bytes`);
    this.name = 'DecodedTooLarge';
  }
}

const inflaters = { gzip: promisify(gunzip), deflate: promisify(inflate), br: promisify(brotliDecompress) };
const MAX_REDIRECTS = 20;

function headersOf(h: HeadersInit | undefined): Record<string, string> {
  if (!h) return {};
  if (h instanceof Headers || Array.isArray(h)) return Object.fromEntries(new Headers(h));
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k.toLowerCase()] = String(v);
  return out;
}

async function decode(body: Buffer, encoding: string | undefined): Promise<Buffer> {
  let e = encoding?.trim().toLowerCase();
  if (e === 'x-gzip') e = 'gzip';
  if (e !== 'gzip' && e !== 'deflate' && e !== 'br') return body;
  try {
    return await inflaters[e](body, { maxOutputLength: MAX_DECODED_BYTES });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw new DecodedTooLarge(e);
    throw err;
  }
}

function once(
  url: URL,
  method: string,
  headers: Record<string, string>,
  body: string | Uint8Array | undefined,
  signal?: AbortSignal | null,
  timeoutMs?: number,
) {
  return new Promise<{ res: IncomingMessage; data: Buffer }>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const https = url.protocol === 'https:';
    const h = { ...headers };
    if (body !== undefined) h['content-length'] = String(Buffer.byteLength(body));
    const req = (https ? httpsRequest : httpRequest)(url, { method, headers: h, agent: https ? httpsAgent : httpAgent });
    const onAbort = () => {
      req.destroy();
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer =
      timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            done();
            req.destroy();
            reject(new TypeError('fetch failed', { cause: new Error(`no answer within ${timeoutMs} ms`) }));
          }, timeoutMs);
    const done = () => {
      signal?.removeEventListener('abort', onAbort);
      clearTimeout(timer);
    };
    const fail = (e: unknown) => (done(), reject(signal?.aborted ? signal.reason : new TypeError('fetch failed', { cause: e })));
    req.on('error', fail);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_ANSWER_BYTES) res.destroy(new Error(`answer larger than ${MAX_ANSWER_BYTES} bytes`));
        else chunks.push(c);
      });
      res.on('error', fail);
      res.on('end', () => {
        done();
        decode(Buffer.concat(chunks), res.headers['content-encoding'] as string | undefined).then(
          (data) => resolve({ res, data }),
          (e) => reject(new TypeError('fetch failed', { cause: e })),
        );
      });
    });
    req.end(body);
  });
}

/** One POST without redirects, its answer read whole: the status and the (decoded) body bytes. Rejects
 *  with TypeError('fetch failed', {cause}) when the connection fails or no whole answer came within timeoutMs. */
export async function leanPost(url: URL, body: string, headers: Record<string, string>, timeoutMs: number): Promise<{ status: number; data: Buffer }> {
  const { res, data } = await once(url, 'POST', headers, body, undefined, timeoutMs);
  return { status: res.statusCode ?? 502, data };
}

/** fetch(url, init) over node:http(s) with kept-alive connections; see the header. */
export async function leanFetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  const body = init.body ?? undefined;
  if (
    input instanceof Request ||
    (body !== undefined && typeof body !== 'string' && !(body instanceof Uint8Array)) ||
    (init.redirect && init.redirect !== 'follow')
  )
    return fetch(input, init);
  let url = new URL(input);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return fetch(input, init);
  let method = (init.method ?? 'GET').toUpperCase();
  let headers = headersOf(init.headers);
  let payload = body as string | Uint8Array | undefined;
  for (let hop = 0; ; hop++) {
    const { res, data } = await once(url, method, headers, payload, init.signal);
    const status = res.statusCode ?? 502;
    const location = res.headers.location;
    if ([301, 302, 303, 307, 308].includes(status) && location && hop < MAX_REDIRECTS) {
      const next = new URL(location, url);
      if (status === 303 || ((status === 301 || status === 302) && method === 'POST')) {
        method = method === 'HEAD' ? 'HEAD' : 'GET';
        payload = undefined;
        headers = Object.fromEntries(Object.entries(headers).filter(([k]) => !k.startsWith('content-')));
      }
      if (next.origin !== url.origin) headers = Object.fromEntries(Object.entries(headers).filter(([k]) => k !== 'authorization' && k !== 'cookie'));
      url = next;
      continue;
    }
    const h = new Headers();
    for (let i = 0; i < res.rawHeaders.length; i += 2) {
      const k = res.rawHeaders[i].toLowerCase();
      if (k !== 'content-encoding' && k !== 'content-length') h.append(k, res.rawHeaders[i + 1]);
    }
    const empty = status === 204 || status === 205 || status === 304 || method === 'HEAD';
    const out = new BufferedResponse(empty ? null : data, {
      status: status < 200 ? 502 : status,
      statusText: res.statusMessage ?? '',
      headers: h,
    });
    Object.defineProperty(out, 'url', { value: url.href });
    if (hop > 0) Object.defineProperty(out, 'redirected', { value: true });
    return out;
  }
}
