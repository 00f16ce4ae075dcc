// x402 header codec. DESIGN.md: the spec says base64url, the official v2 clients decode only
// standard base64, so we emit JSON whose base64 is the same in both alphabets: ASCII only, with
// `>`, `?`, `~` and DEL escaped as \u00XX inside strings (only those bytes, at the third byte of
// a group, make the sextets 62/63), padded with trailing spaces to a multiple of 3 bytes (no `=`).
// Decoding accepts either alphabet with or without padding, after a size cap.

import { AppError } from '../errors.js';

/** Largest encoded header we read (bytes of the header value). */
export const MAX_HEADER_BYTES = 8 * 1024;

const ESCAPE = /[>?~\u007f-\uffff]/g;

/** JSON text that is pure ASCII and has none of the bytes that make base64 alphabets differ. */
export function safeJson(value: unknown): string {
  const text = JSON.stringify(value).replace(ESCAPE, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  return text + ' '.repeat((3 - (text.length % 3)) % 3);
}

/** Encodes a value for an x402 header; the result reads the same as base64 and base64url. */
export function encodeHeader(value: unknown): string {
  return Buffer.from(safeJson(value), 'ascii').toString('base64');
}

const B64 = /^[A-Za-z0-9+/_-]+={0,2}$/;
const utf8 = new TextDecoder('utf-8', { fatal: true });

function invalid(detail: string): AppError {
  return AppError.of('payment_invalid', detail);
}

/** Decodes a header written in standard base64 or base64url, padded or not, into JSON. */
export function decodeHeader(raw: string | string[] | undefined, name = 'payment header'): unknown {
  if (Array.isArray(raw)) throw invalid(`send the ${name} once; it was sent ${raw.length} times`);
  if (raw === undefined) throw invalid(`the ${name} is missing`);
  if (raw.length > MAX_HEADER_BYTES) throw AppError.of('payment_too_large', `the ${name} is ${raw.length} bytes; at most ${MAX_HEADER_BYTES} are accepted`);
  const s = raw.trim();
  if (!s || !B64.test(s)) throw invalid(`the ${name} is not base64 or base64url`);
  const body = s.replace(/=+$/, '');
  if (body.length % 4 === 1) throw invalid(`the ${name} has a truncated base64 length`);
  if (s.length - body.length > 0 && s.length % 4 !== 0) throw invalid(`the ${name} has wrong base64 padding`);
  const bytes = Buffer.from(body.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw invalid(`the ${name} does not decode to UTF-8 text`);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw invalid(`the ${name} does not decode to JSON`);
  }
}
