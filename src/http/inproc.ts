// The request and response objects of a route run in-process (Router.invoke, the MCP tools): a
// readable request of the given headers and raw body, and a writable response that collects
// what the handler writes — status, headers, bytes — so a route that streams its answer (a file,
// an archive) runs unchanged and its answer is returned instead of sent. The collected body is
// bounded: past `max` bytes the response is destroyed, as a client that went away.

import { Readable, Writable } from 'node:stream';
import type { Req, Res } from './types.js';

export interface Collected {
  status: number;
  headers: Record<string, string | string[]>;
  body: Buffer;
  /** The handler wrote more than `max` bytes: the answer was cut there. */
  cut: boolean;
}

export function inprocRequest(method: string, url: string, headers: Record<string, string>, body?: Buffer): Req {
  const req = Readable.from(body && body.length ? [body] : [], { objectMode: false }) as Readable & Record<string, unknown>;
  Object.assign(req, { method, url, headers, httpVersionMajor: 2, httpVersionMinor: 0, socket: null });
  return req as unknown as Req;
}

/** A response that collects; `done` settles once the handler ended it (or it was cut/destroyed). */
export function inprocResponse(max: number): { res: Res; done: Promise<Collected> } {
  const chunks: Buffer[] = [];
  let size = 0;
  let cut = false;
  const state = { status: 200, headers: {} as Record<string, string | string[]>, sent: false };
  const w = new Writable({
    write(chunk: Buffer, _enc, cb) {
      size += chunk.length;
      if (size > max) {
        cut = true;
        cb(new Error('in-process answer over its bound'));
        return;
      }
      chunks.push(chunk);
      cb();
    },
  }) as Writable & Record<string, unknown>;
  w.on('error', () => {});
  const res = Object.assign(w, {
    get statusCode() {
      return state.status;
    },
    set statusCode(v: number) {
      state.status = v;
    },
    get headersSent() {
      return state.sent;
    },
    writeHead(status: number, headers?: Record<string, string | string[]>) {
      state.status = status;
      for (const [k, v] of Object.entries(headers ?? {})) state.headers[k.toLowerCase()] = v;
      state.sent = true;
      return w;
    },
    setHeader(k: string, v: string | string[]) {
      state.headers[k.toLowerCase()] = v;
      return w;
    },
    getHeader: (k: string) => state.headers[k.toLowerCase()],
    removeHeader: (k: string) => void delete state.headers[k.toLowerCase()],
  });
  const done = new Promise<Collected>((resolve) => {
    const settle = () => resolve({ status: state.status, headers: state.headers, body: Buffer.concat(chunks), cut });
    w.once('finish', settle);
    w.once('close', settle);
  });
  return { res: res as unknown as Res, done };
}

/** The request again after part of its body was read: those bytes first, then (`rest`) what the
 *  request still holds. Method, URL, headers and socket are the request's. */
export function withBody(req: Req, chunks: Buffer[], rest: boolean): Req {
  if (!chunks.length && rest) return req;
  async function* bytes() {
    yield* chunks;
    if (rest) for await (const c of req as AsyncIterable<Buffer>) yield c;
  }
  const r = Readable.from(bytes(), { objectMode: false }) as Readable & Record<string, unknown>;
  Object.assign(r, { method: req.method, url: req.url, headers: req.headers, httpVersionMajor: req.httpVersionMajor, socket: req.socket });
  return r as unknown as Req;
}

/** An in-process request `method url` of the given headers and body, answered by `send` (another
 *  host's API app over the channel), its answer collected: a JSON body parsed, any other as bytes. */
export async function collectAnswer(
  method: string,
  url: string,
  headers: Record<string, string>,
  body: Buffer | undefined,
  max: number,
  send: (req: Req, res: Res) => Promise<void>,
): Promise<Collected & { json?: unknown }> {
  const req = inprocRequest(method, url, { ...headers, ...(body ? { 'content-length': String(body.length) } : {}) }, body);
  const { res, done } = inprocResponse(max);
  await send(req, res);
  const c = await done;
  const type = String(c.headers['content-type'] ?? '');
  if (/^application\/(json|[\w.+-]+\+json)\b/.test(type) && !c.cut) {
    try {
      return { ...c, json: JSON.parse(c.body.toString('utf8')) };
    } catch {
      return c;
    }
  }
  return c;
}
