// The request reader: the edge lane's reader of a client's request head, straight from the
// connection's bytes. It takes only the plainest requests — a bodiless GET or HEAD in origin form
// with exactly one Host, nothing that frames a body (a Content-Length of 0 at most, no
// Transfer-Encoding), no Upgrade or Expect, every line a well-formed field — and says of anything
// else that it is node's: node's HTTP server (llhttp) then reads the same bytes and answers or
// refuses them as it always does. So a head with a bare CR or LF, a control byte, an obs-fold or
// more than node's head limit is handed on at once (node answers 400/431 at once), not waited on.
// A head that asks to close the connection and is followed by more bytes is node's too (llhttp
// refuses data after `Connection: close`). The grammar is grammar.ts's.

import { BAD_IN_FIELDS, CTL, END_OF_HEAD, fieldColon, lineEnd, trimmed } from './grammar.js';

export interface RequestHead {
  method: 'GET' | 'HEAD';
  target: string;
  /** The Host header as sent. */
  host: string;
  /** name, value, name, value… as sent (node's rawHeaders shape). */
  raw: string[];
  /** The client asked to close after the answer (Connection: close). */
  close: boolean;
  /** The client's X-Request-Id, if it sent one. */
  rid?: string;
}

export type RequestRead =
  /** no complete head yet, and what there is may still become one the lane takes */
  | { kind: 'more' }
  /** not the lane's: node's server reads the bytes from here on */
  | { kind: 'node' }
  /** a head the lane takes; `size`: its bytes, CRLFCRLF included */
  | { kind: 'head'; head: RequestHead; size: number };

/** node's own limit on a request head (http.maxHeaderSize): a longer one is node's to refuse. */
export const MAX_REQUEST_HEAD = 16 * 1024;
const MAX_FIELDS = 100;
const REQUEST_LINE = /^(GET|HEAD) (\/[\x21-\x7e]*) HTTP\/1\.1$/;
const GET = Buffer.from('GET /', 'latin1');
const HEAD = Buffer.from('HEAD /', 'latin1');
const MORE: RequestRead = { kind: 'more' };
const NODE: RequestRead = { kind: 'node' };

/** Reads the head at the start of `buf` (the connection's unread bytes). */
export function readRequest(buf: Buffer): RequestRead {
  const prefix = buf[0] === 0x48 ? HEAD : GET;
  const n = Math.min(buf.length, prefix.length);
  if (buf.compare(prefix, 0, n, 0, n) !== 0) return NODE;
  const end = buf.indexOf(END_OF_HEAD);
  if (end < 0) {
    if (buf.length > MAX_REQUEST_HEAD) return NODE;
    // a CR at the very end may yet be followed by its LF: the line before it is then complete
    const cr = buf[buf.length - 1] === 13;
    const text = buf.toString('latin1', 0, cr ? buf.length - 1 : buf.length);
    return BAD_IN_FIELDS.test(text) || !mayBecomeHead(text, cr) ? NODE : MORE;
  }
  if (end > MAX_REQUEST_HEAD) return NODE;
  const text = buf.toString('latin1', 0, end);
  if (BAD_IN_FIELDS.test(text)) return NODE;
  const head = readHead(text);
  if (!head || (head.close && buf.length > end + 4)) return NODE;
  return { kind: 'head', head, size: end + 4 };
}

/** The prefixes of a lane request line (its method's own prefixes are checked before), and of a field name. */
const PARTIAL_LINE = /^(GET|HEAD) (\/[\x21-\x7e]*( (H(T(T(P(\/(1(\.1?)?)?)?)?)?)?)?)?)?$/;
const PARTIAL_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]*$/;

/**
 * Whether an incomplete head may still become one the lane takes: its complete lines read as a
 * lane head would (Host aside) and its last line can still become a request line or a field
 * (`lineEnded`: the last line's CR came, so it is complete).
 * A head that can only be refused is node's at once, as node refuses it at once.
 */
function mayBecomeHead(text: string, lineEnded: boolean): boolean {
  if (lineEnded) return readHead(text.endsWith('\r\n') ? text.slice(0, -2) : text, false) !== undefined;
  const last = text.lastIndexOf('\r\n');
  if (last < 0) return PARTIAL_LINE.test(text) || text.length < 5;
  if (!readHead(text.slice(0, last), false)) return false;
  const line = text.slice(last + 2);
  const colon = line.indexOf(':');
  if (colon < 0) return PARTIAL_NAME.test(line);
  if (fieldColon(line, 0, line.length) < 0) return false;
  const value = trimmed(line, colon + 1, line.length);
  switch (line.slice(0, colon).toLowerCase()) {
    case 'content-length': // llhttp refuses a length's first wrong byte at once
      return value === '' || value === '0';
    case 'transfer-encoding':
    case 'upgrade':
    case 'expect':
      return false;
    default:
      return !CTL.test(value);
  }
}

/** A head's text (without its CRLFCRLF, with no bare CR, LF or control byte) as a lane request, or undefined. `complete`: a head without Host is not one. */
export function readHead(text: string, complete = true): RequestHead | undefined {
  let eol = lineEnd(text, 0);
  const m = REQUEST_LINE.exec(text.slice(0, eol));
  if (!m) return undefined;
  const raw: string[] = [];
  let host: string | undefined;
  let rid: string | undefined;
  let close = false;
  let length = false;
  while (eol < text.length) {
    const start = eol + 2;
    eol = lineEnd(text, start);
    const colon = fieldColon(text, start, eol);
    if (colon < 0 || raw.length >= MAX_FIELDS * 2) return undefined;
    const name = text.slice(start, colon);
    const value = trimmed(text, colon + 1, eol);
    if (CTL.test(value)) return undefined;
    switch (name.length) {
      case 4:
        if (name.toLowerCase() === 'host') {
          if (host !== undefined) return undefined;
          host = value;
        }
        break;
      case 6:
        if (name.toLowerCase() === 'expect') return undefined;
        break;
      case 7:
        if (name.toLowerCase() === 'upgrade') return undefined;
        break;
      case 10:
        if (name.toLowerCase() === 'connection') {
          for (const t of value.toLowerCase().split(',')) {
            const tok = t.trim();
            if (tok === 'close') close = true;
            else if (tok === 'upgrade') return undefined;
          }
        }
        break;
      case 12:
        if (rid === undefined && name.toLowerCase() === 'x-request-id') rid = value;
        break;
      case 14:
        // a GET may say its body is empty; any other length, or a second one, is node's to judge
        if (name.toLowerCase() === 'content-length') {
          if (value !== '0' || length) return undefined;
          length = true;
        }
        break;
      case 17:
        if (name.toLowerCase() === 'transfer-encoding') return undefined;
        break;
    }
    raw.push(name, value);
  }
  if (host === undefined && complete) return undefined;
  return { method: m[1] as 'GET' | 'HEAD', target: m[2], host: host ?? '', raw, close, rid };
}
