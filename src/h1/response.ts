// The response reader: an incremental reader of what an app answers the proxy. It treats the app
// as hostile: it
// bounds the head, accepts only valid names and values (in every field, trailers included),
// settles the body framing as RFC 9112 §6.3 says (refusing the ambiguous cases a smuggling
// attempt relies on), decodes chunked bodies, skips interim 1xx answers and tells whether the
// connection can be reused afterwards.
// The headers it hands on are already cleaned for HTTP/1.1 and HTTP/2 clients (no hop-by-hop
// field, none that Connection names, one copy of the single-value ones). The grammar is grammar.ts's.

import { BAD_IN_FIELDS, CTL, END_OF_HEAD, HOP, LENGTH, connectionTokens, fieldColon, lineEnd, trimmed } from './grammar.js';

/** An app's answer that cannot be forwarded; becomes a 502 page. */
export class UpstreamProtocolError extends Error {
  readonly code = 'BAD_RESPONSE';
}

export interface ResponseHead {
  status: number;
  /**
   * name, value, name, value… in the app's order and case (what node's writeHead takes as is),
   * cleaned: no hop-by-hop or Connection-named headers, one copy of the single-value ones.
   */
  headers: string[];
  /** The app set its own X-Request-Id (it is then passed on instead of ours). */
  requestId: boolean;
  /** Bytes of the head as the app sent it (for egress accounting). */
  size: number;
}

export interface ReaderEvents {
  head(h: ResponseHead): void;
  /** A piece of the body: a view of the fed bytes, valid only during the call. */
  data(chunk: Buffer): void;
  /** The response is complete; `reusable` when the connection may carry another request. */
  end(reusable: boolean): void;
}

const MAX_HEAD = 64 * 1024;
const MAX_LINE = 4096;
const STATUS_LINE = /^HTTP\/1\.([01]) ([1-5]\d\d)(?: [^\r\n]*)?$/;
/** Headers node itself keeps once (the first wins); a second copy is dropped, as node's client does. */
const SINGLE = new Map(
  [
    'content-type',
    'content-length',
    'location',
    'etag',
    'last-modified',
    'server',
    'age',
    'expires',
    'retry-after',
    'authorization',
    'from',
    'host',
    'referer',
    'user-agent',
    'max-forwards',
    'if-modified-since',
    'if-unmodified-since',
    'proxy-authorization',
  ].map((n, i) => [n, 1 << i]),
);

const NO_TOKENS: string[] = [];
/** The Connection values nearly every app sends, read without splitting. */
const SIMPLE_CONNECTION = new Map([
  ['keep-alive', ['keep-alive']],
  ['Keep-Alive', ['keep-alive']],
  ['close', ['close']],
  ['Close', ['close']],
]);

const enum S {
  Head,
  Length,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailers,
  Close,
  Done,
}

export class ResponseReader {
  private state = S.Head;
  private pending: Buffer | undefined;
  private left = 0;
  private keepAlive = false;

  /** `headRequest`: the answer to HEAD has no body whatever its headers say. */
  constructor(
    private readonly on: ReaderEvents,
    private readonly headRequest: boolean,
  ) {}

  get done(): boolean {
    return this.state === S.Done;
  }

  /** Feeds bytes from the app (kept only as copies); throws UpstreamProtocolError on anything invalid. */
  feed(chunk: Buffer): void {
    if (this.pending) {
      chunk = Buffer.concat([this.pending, chunk]);
      this.pending = undefined;
    }
    let at = 0;
    while (at < chunk.length) {
      switch (this.state) {
        case S.Head: {
          const end = chunk.indexOf(END_OF_HEAD, at);
          if (end < 0) {
            // (what is held may end in the first three bytes of the CRLFCRLF)
            if (chunk.length - at > MAX_HEAD + 3) throw new UpstreamProtocolError('response head too large');
            this.pending = Buffer.from(chunk.subarray(at));
            return;
          }
          if (end - at > MAX_HEAD) throw new UpstreamProtocolError('response head too large');
          this.parseHead(chunk.toString('latin1', at, end), end + 4 - at);
          at = end + 4;
          if ((this.state as S) === S.Done) return this.finish(at < chunk.length);
          break;
        }
        case S.Length: {
          const n = Math.min(this.left, chunk.length - at);
          this.left -= n;
          const part = at === 0 && n === chunk.length ? chunk : chunk.subarray(at, at + n);
          at += n;
          if (this.left === 0) this.state = S.Done;
          this.on.data(part);
          if ((this.state as S) === S.Done) return this.finish(at < chunk.length);
          break;
        }
        case S.ChunkEnd: {
          // exactly CRLF after a chunk's data, checked as soon as the bytes are there
          if (chunk[at] !== 13 || (at + 1 < chunk.length && chunk[at + 1] !== 10)) throw new UpstreamProtocolError('missing CRLF after chunk data');
          if (at + 1 === chunk.length) {
            this.pending = Buffer.from(chunk.subarray(at));
            return;
          }
          at += 2;
          this.state = S.ChunkSize;
          break;
        }
        case S.ChunkSize:
        case S.Trailers: {
          const eol = chunk.indexOf('\r\n', at, 'latin1');
          if (eol < 0) {
            if (chunk.length - at > MAX_LINE + 1) throw new UpstreamProtocolError('chunk line too long');
            this.pending = Buffer.from(chunk.subarray(at));
            return;
          }
          if (eol - at > MAX_LINE) throw new UpstreamProtocolError('chunk line too long');
          const line = chunk.toString('latin1', at, eol);
          at = eol + 2;
          this.chunkLine(line);
          if ((this.state as S) === S.Done) return this.finish(at < chunk.length);
          break;
        }
        case S.ChunkData: {
          const n = Math.min(this.left, chunk.length - at);
          this.left -= n;
          const part = chunk.subarray(at, at + n);
          at += n;
          if (this.left === 0) this.state = S.ChunkEnd;
          this.on.data(part);
          break;
        }
        case S.Close:
          this.on.data(at === 0 ? chunk : chunk.subarray(at));
          return;
        case S.Done:
          return; // unreachable: a completed answer returns above
      }
    }
  }

  /** The app closed the connection: ends a close-delimited body, else the answer was cut. */
  eof(): void {
    if (this.state === S.Close) {
      this.state = S.Done;
      this.on.end(false);
      return;
    }
    if (this.state !== S.Done) throw new UpstreamProtocolError(this.state === S.Head ? 'connection closed before a response' : 'response cut short');
  }

  private finish(extra: boolean): void {
    this.on.end(this.keepAlive && !extra);
  }

  private parseHead(text: string, size: number): void {
    let eol = lineEnd(text, 0);
    const m = STATUS_LINE.exec(text.slice(0, eol));
    if (!m) throw new UpstreamProtocolError('invalid status line');
    const status = Number(m[2]);
    // name, value, name, value… as the app sent them, minus what may not be passed on
    const headers: string[] = [];
    let length: string | undefined;
    let te: string | undefined;
    let conn: string | undefined;
    let seen = 0; // bits of SINGLE
    let requestId = false;
    // one scan of all header lines for what no field may hold; only when it finds something is each value checked (and named)
    const clean = eol >= text.length || !BAD_IN_FIELDS.test(text.slice(eol + 2));
    while (eol < text.length) {
      const start = eol + 2;
      eol = lineEnd(text, start);
      // obs-fold (a line starting with whitespace) and names with spaces are refused alike.
      const colon = fieldColon(text, start, eol);
      if (colon < 0) throw new UpstreamProtocolError('invalid header line or header name');
      const rawName = text.slice(start, colon);
      const value = clean ? trimmed(text, colon + 1, eol) : fieldValue(text, colon + 1, eol);
      const name = rawName.toLowerCase();
      if (name === 'content-length') {
        if (!LENGTH.test(value) || (length !== undefined && length !== value)) throw new UpstreamProtocolError('invalid Content-Length');
        if (length !== undefined) continue;
        length = value;
        if (status === 204) continue;
      } else if (name === 'transfer-encoding') {
        // an empty coding list is malformed (RFC 9112 §6.1), also where no body follows (node 24's llhttp agrees)
        if (!value) throw new UpstreamProtocolError('empty Transfer-Encoding');
        te = te === undefined ? value : `${te}, ${value}`;
      } else if (name === 'connection') conn = conn === undefined ? value : `${conn}, ${value}`;
      else if (name === 'x-request-id') requestId = true;
      if (HOP.has(name)) continue;
      const bit = SINGLE.get(name);
      if (bit !== undefined) {
        if (seen & bit) continue;
        seen |= bit;
      }
      headers.push(rawName, value);
    }
    if (status < 200) {
      // 100 Continue, 102, 103: interim answers are read and dropped; a 101 is never asked for.
      if (status === 101) throw new UpstreamProtocolError('unexpected 101 Switching Protocols');
      return;
    }
    const tokens = conn === undefined ? NO_TOKENS : (SIMPLE_CONNECTION.get(conn) ?? connectionTokens(conn));
    this.keepAlive = m[1] === '1' ? !tokens.includes('close') : tokens.includes('keep-alive');
    // the headers Connection names are dropped too (hop-by-hop ones already were)
    let drop: string[] | undefined = tokens.some((t) => !HOP.has(t)) ? tokens : undefined;
    if (status === 204 || status === 304) {
      this.state = S.Done;
    } else if (this.headRequest) {
      // No body, but an answer that would otherwise run to the close may be followed by the body a
      // GET gets (an app that answers HEAD like GET): the connection is not reused, as node's client.
      this.state = S.Done;
      if (te !== undefined ? !/(^|,)[ \t]*chunked$/i.test(te) : length === undefined) this.keepAlive = false;
    } else if (te !== undefined) {
      // Only plain chunked is understood; with a Content-Length too, the framing is suspicious
      // and the connection is not reused (RFC 9112 §6.3 ¶3).
      if (te.toLowerCase() !== 'chunked') throw new UpstreamProtocolError('unsupported Transfer-Encoding');
      if (length !== undefined) {
        this.keepAlive = false;
        drop = [...(drop ?? []), 'content-length'];
      }
      this.state = S.ChunkSize;
    } else if (length !== undefined) {
      this.left = Number(length);
      this.state = this.left === 0 ? S.Done : S.Length;
    } else {
      this.keepAlive = false;
      this.state = S.Close;
    }
    this.on.head({ status, headers: drop ? without(headers, drop) : headers, requestId, size });
  }

  private chunkLine(line: string): void {
    if (this.state === S.Trailers) {
      // trailer fields are checked like header fields (a bare CR or LF in one would end it early
      // for a laxer parser), then dropped
      if (line === '') this.state = S.Done;
      else checkField(line);
      return;
    }
    const m = /^([0-9a-fA-F]{1,12})[ \t]*(?:;.*)?$/.exec(line);
    if (!m) throw new UpstreamProtocolError('invalid chunk size');
    this.left = parseInt(m[1], 16);
    this.state = this.left === 0 ? S.Trailers : S.ChunkData;
  }
}

/**
 * A field value without the optional whitespace around it: spaces and tabs only (RFC 9110 §5.5;
 * String.trim would also take CR, LF, VT, FF and NBSP, so "5<VT>" would read as a length of 5).
 * Control bytes are refused in every field, also those that are not passed on: a bare CR or LF
 * in a dropped hop-by-hop value would hide a line that a parser ending lines there reads.
 */
function fieldValue(text: string, from: number, to: number): string {
  const value = trimmed(text, from, to);
  if (CTL.test(value)) throw new UpstreamProtocolError('invalid header value');
  return value;
}

/** Refuses a trailer line that would not do as a header line. */
function checkField(line: string): void {
  const colon = fieldColon(line, 0, line.length);
  if (colon < 0) throw new UpstreamProtocolError('invalid trailer field');
  fieldValue(line, colon + 1, line.length);
}

/** A flat header list without the names in `drop` (lowercase). */
function without(flat: string[], drop: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < flat.length; i += 2) if (!drop.includes(flat[i].toLowerCase())) out.push(flat[i], flat[i + 1]);
  return out;
}
