// The head writer: the request head the proxy sends an app (the client's fields minus what a
// forwarded request never carries, then ours) and the response head the lane writes to a client
// (an app's cleaned answer, our request id and date, the framing it needs), with the Date value
// made once a second by its owner's HttpDate (as node's server does), not by a module global.

import { STATUS_CODES } from 'node:http';
import { HOP, connectionTokens } from './grammar.js';

/** Client claims about itself that only we may make. */
export const SPOOFABLE = ['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-port', 'x-real-ip', 'forwarded'];
/**
 * What a plain request to an app never carries from the client: hop-by-hop, spoofable, and the
 * two we write ourselves or already answered (Host from the request's authority; Expect, since
 * node's server has sent the 100 Continue).
 */
export const REQUEST_DROP = new Set([...HOP, ...SPOOFABLE, 'host', 'expect']);

const CRLF = '\r\n';

/**
 * The head of a request to an app: request line, the client's headers minus hop-by-hop,
 * pseudo and spoofable ones (given as node's rawHeaders), then ours. `chunked` when the body is
 * re-framed as chunked (a chunked HTTP/1.1 body, or an HTTP/2 body of unknown length).
 */
export function requestHead(method: string, target: string, host: string, raw: string[], ip: string, proto: string, chunked: boolean): string {
  let head = `${method} ${target} HTTP/1.1${CRLF}host: ${host}${CRLF}${passedFields(raw)}`;
  head += `x-forwarded-for: ${ip}${CRLF}x-real-ip: ${ip}${CRLF}x-forwarded-proto: ${proto}${CRLF}x-forwarded-host: ${host}${CRLF}`;
  if (chunked) head += `transfer-encoding: chunked${CRLF}`;
  return head + CRLF;
}

/**
 * The client's fields that go on, as head lines: pseudo, hop-by-hop (with every name its
 * Connection headers list, all of them), spoofable, Host and Expect dropped, and the names `drop`
 * says (lowercase).
 */
export function passedFields(raw: string[], drop?: (lower: string) => boolean): string {
  const named = connectionNamed(raw);
  let out = '';
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    if (name.charCodeAt(0) === 58 /* : */) continue;
    const lower = name.toLowerCase();
    if (REQUEST_DROP.has(lower) || (named && named.includes(lower)) || drop?.(lower)) continue;
    out += `${name}: ${raw[i + 1]}${CRLF}`;
  }
  return out;
}

/** The names every Connection header of a head (node's raw pairs) lists, lowercase; undefined when there is none. */
export function connectionNamed(raw: string[]): string[] | undefined {
  let named: string[] | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].length === 10 && raw[i].toLowerCase() === 'connection') named = [...(named ?? []), ...connectionTokens(raw[i + 1])];
  }
  return named;
}

/** A whole answer in one buffer: its head, its body (the parts, in order), framed as chunked when `chunked`. */
export function wholeAnswer(head: string, chunked: boolean, parts: readonly Buffer[]): Buffer {
  let body = 0;
  for (const p of parts) body += p.length;
  const prefix = chunked && body > 0 ? `${head}${body.toString(16)}${CRLF}` : head;
  const suffix = chunked ? (body > 0 ? `${CRLF}0${CRLF}${CRLF}` : `0${CRLF}${CRLF}`) : '';
  const out = Buffer.allocUnsafe(prefix.length + body + suffix.length);
  let at = out.write(prefix, 0, 'latin1');
  for (const p of parts) at += p.copy(out, at);
  if (suffix) out.write(suffix, at, 'latin1');
  return out;
}

/** The Date header value, made at most once a second; one per owner (the forwarder), not per process. */
export class HttpDate {
  private text = '';
  private at = 0;

  constructor(private readonly now: () => number = Date.now) {}

  value(): string {
    const now = this.now();
    if (now - this.at >= 1000 || now < this.at) {
      this.at = now - (now % 1000);
      this.text = new Date(this.at).toUTCString();
    }
    return this.text;
  }
}

export interface AnswerHead {
  /** The head text, CRLFCRLF included. */
  text: string;
  /** The body must be re-framed as chunked (the app gave no length). */
  chunked: boolean;
}

/**
 * The head of an answer to an HTTP/1.1 client: status line, the app's cleaned headers (flat
 * name, value list), our request id unless the app set one, a Date unless it did, chunked framing
 * for a body of unknown length, and `connection: close` when the connection ends after it.
 */
export function responseHead(status: number, headers: string[], o: { requestId?: string; date: HttpDate; bodiless: boolean; close: boolean }): AnswerHead {
  let s = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'unknown'}${CRLF}`;
  let length = false;
  let date = false;
  for (let i = 0; i < headers.length; i += 2) {
    const n = headers[i];
    if (n.length === 14 && n.toLowerCase() === 'content-length') length = true;
    else if (n.length === 4 && n.toLowerCase() === 'date') date = true;
    s += `${n}: ${headers[i + 1]}${CRLF}`;
  }
  if (o.requestId !== undefined) s += `x-request-id: ${o.requestId}${CRLF}`;
  if (!date) s += `date: ${o.date.value()}${CRLF}`;
  const chunked = !length && !o.bodiless;
  if (chunked) s += `transfer-encoding: chunked${CRLF}`;
  if (o.close) s += `connection: close${CRLF}`;
  return { text: s + CRLF, chunked };
}
