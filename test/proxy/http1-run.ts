// The two parsers of the differential test, each reduced to one Outcome for a byte stream:
// the proxy's ResponseReader (fed in given pieces, then told of the close, with the head's
// headers checked the way res.writeHead checks them in exchange.ts) and node's own client parser
// (llhttp) through the public http.request API, over an in-memory socket that hands the bytes on
// in pieces whose ends are controlled (so where the message ends is known to the byte) or over a
// real loopback socket from a raw net server (to show the in-memory socket changes nothing).

import { request, validateHeaderName, validateHeaderValue, type ClientRequest, type IncomingMessage } from 'node:http';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { ResponseReader, type ResponseHead } from '../../src/h1/index.js';

export interface Outcome {
  /** Why the stream was refused (parser error code or message); undefined when it was accepted. */
  error?: string;
  status?: number;
  /** Reader: the headers passed on. llhttp: rawHeaders. */
  headers?: string[];
  body: Buffer;
  /** Offset just past the message, when it ended before the close; undefined if the close ended it. */
  end?: number;
  /** Reader: the connection may carry another request. llhttp: its shouldKeepAlive. */
  reusable?: boolean;
  /** llhttp: the statuses of the interim answers before this one. */
  info: number[];
}

export interface ReaderOutcome extends Outcome {
  /** The fed piece during which the answer ended (start and end offsets). */
  endedIn?: [number, number];
}

/** Feeds `bytes` cut at `cuts` (ascending offsets), then the close, as exchange.ts does. */
export function runReader(bytes: Buffer, head: boolean, cuts: number[]): ReaderOutcome {
  const parts: Buffer[] = [];
  const out: ReaderOutcome = { body: Buffer.alloc(0), info: [] };
  let h: ResponseHead | undefined;
  let ended = false;
  const reader = new ResponseReader(
    {
      head: (x) => (h = x),
      data: (d) => void parts.push(Buffer.from(d)),
      end: (reusable) => {
        ended = true;
        out.reusable = reusable;
      },
    },
    head,
  );
  try {
    let from = 0;
    for (const to of [...cuts, bytes.length]) {
      if (to <= from) continue;
      reader.feed(bytes.subarray(from, to));
      if (ended) {
        out.endedIn = [from, to];
        // with nothing after it in the piece, the answer ended exactly there
        if (out.reusable) out.end = to;
        break;
      }
      from = to;
    }
    if (!ended) reader.eof();
    if (h) {
      // what res.writeHead would refuse (exchange.ts turns that into a 502)
      for (let i = 0; i < h.headers.length; i += 2) {
        validateHeaderName(h.headers[i]);
        validateHeaderValue(h.headers[i], h.headers[i + 1]);
      }
    }
  } catch (e) {
    out.error = (e as Error).message;
  }
  out.status = h?.status;
  out.headers = h?.headers;
  out.body = Buffer.concat(parts);
  return out;
}

/**
 * Node's client parser fed over an in-memory socket; resolves after the request closes. Bytes in
 * `fine` (offsets, inclusive) go one at a time, the rest in pieces of up to 1 KiB: when the
 * message ends inside a bigger piece, the stream is read again a byte at a time, so `end` is
 * always exact (give the range where the message likely ends, to be fast).
 */
export async function runLlhttp(bytes: Buffer, head: boolean, fine: [number, number] = [0, bytes.length]): Promise<Outcome> {
  let coarse = false;
  const sock = new Duplex({ read() {}, write: (_c, _e, cb) => cb() });
  const req = request({
    method: head ? 'HEAD' : 'GET',
    path: '/',
    headers: { connection: 'keep-alive' },
    createConnection: () => sock as never,
    maxHeaderSize: 1 << 20,
  });
  const out = await collect(req, (res) => {
    // The parser can end a message only after a CRLFCRLF: up to the first one, one piece.
    const first = bytes.indexOf('\r\n\r\n');
    let at = first > 0 ? first : 0;
    let end: number | undefined;
    if (at > 0) sock.push(bytes.subarray(0, at));
    while (at < bytes.length && !req.destroyed && end === undefined) {
      const n = at >= fine[0] && at <= fine[1] ? 1 : Math.min(1024, (at < fine[0] ? fine[0] : bytes.length) - at);
      sock.push(bytes.subarray(at, at + n));
      if (sock.readableLength > 0) throw new Error('the in-memory socket did not hand the bytes on at once');
      at += n;
      if (res()?.complete) {
        end = at;
        coarse = n > 1;
      }
    }
    sock.push(null); // the close (after a complete message node no longer listens)
    return end;
  }).finally(() => sock.destroy());
  return coarse ? runLlhttp(bytes, head) : out;
}

/** Node's client parser over loopback TCP, from a server that writes `bytes` and closes. */
export async function runLlhttpSocket(bytes: Buffer, head: boolean): Promise<Outcome> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.end(bytes);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const req = request({
      host: '127.0.0.1',
      port: (server.address() as AddressInfo).port,
      method: head ? 'HEAD' : 'GET',
      agent: false,
      headers: { connection: 'keep-alive' },
      maxHeaderSize: 1 << 20,
    });
    return await collect(req, () => undefined);
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  }
}

/**
 * Gathers one response from `req`. `feed` is called once the socket is attached and returns the
 * offset where the message ended, if it knows; it can look at the response so far.
 */
function collect(req: ClientRequest, feed: (res: () => IncomingMessage | undefined) => number | undefined): Promise<Outcome> {
  return new Promise((resolve) => {
    const out: Outcome = { body: Buffer.alloc(0), info: [] };
    const parts: Buffer[] = [];
    let res: IncomingMessage | undefined;
    req.on('information', (i) => out.info.push(i.statusCode));
    req.on('response', (r) => {
      res = r;
      out.status = r.statusCode;
      out.headers = r.rawHeaders;
      r.on('data', (d: Buffer) => parts.push(d));
      r.on('error', () => {});
    });
    req.on('error', (e: Error & { code?: string }) => {
      // a parse error after the message was complete belongs to bytes that followed it
      if (!res?.complete) out.error ??= e.code ? `${e.code} ${e.message}` : e.message;
    });
    req.on('socket', () =>
      process.nextTick(() => {
        out.end = feed(() => res);
        if (out.end !== undefined) out.reusable = req.shouldKeepAlive;
      }),
    );
    req.on('close', () => {
      setImmediate(() => {
        if (!res?.complete) out.error ??= 'incomplete';
        else if (out.end === undefined) out.reusable = false;
        out.body = Buffer.concat(parts);
        resolve(out);
      });
    });
    req.end();
  });
}
