// The HTTP/1.1 grammar (RFC 9110 §5, RFC 9112) that every reader and writer of this module
// shares, so that the edge's request reader and the proxy's response reader cannot drift apart:
// what a field name is (token), which bytes a value may not hold (CTL), where a head ends
// (CRLFCRLF, with no bare CR or LF before it), the optional whitespace around a value (spaces and
// tabs only), the hop-by-hop fields and the Content-Length syntax.

/** A field name: RFC 9110 §5.6.2 token. */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Bytes a field value may not hold: controls other than HTAB (obs-text 0x80-0xFF is allowed, as llhttp allows it). */
export const CTL = /[\x00-\x08\x0a-\x1f\x7f]/;
/** In header lines (CRLF-separated): a control byte other than HTAB, or a CR or LF that is not part of a CRLF. */
export const BAD_IN_FIELDS = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|(?<!\r)\n/;
/** The end of a head. */
export const END_OF_HEAD = Buffer.from('\r\n\r\n', 'latin1');
/** A Content-Length value (at most 15 digits: a safe integer). */
export const LENGTH = /^\d{1,15}$/;

/** Hop-by-hop (RFC 9110 §7.6.1) plus the legacy ones proxies also drop. */
export const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
]);

/** The lowercase tokens of a Connection value (or several). */
export const connectionTokens = (v: string | string[] | undefined): string[] =>
  (Array.isArray(v) ? v.join(',') : (v ?? ''))
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter(Boolean);

/**
 * The colon of the field line text[start, eol), or -1 when the line is not a field: no colon, an
 * empty name, or a name that is not a token (which refuses obs-fold, a line starting with
 * whitespace, and whitespace before the colon alike).
 */
export function fieldColon(text: string, start: number, eol: number): number {
  const colon = text.indexOf(':', start);
  if (colon <= start || colon > eol || !TOKEN.test(text.slice(start, colon))) return -1;
  return colon;
}

/** text[from, to) without the spaces and tabs around it (String.trim would also take CR, LF, VT, FF and NBSP). */
export function trimmed(text: string, from: number, to: number): string {
  while (from < to && (text.charCodeAt(from) === 32 || text.charCodeAt(from) === 9)) from++;
  while (to > from && (text.charCodeAt(to - 1) === 32 || text.charCodeAt(to - 1) === 9)) to--;
  return text.slice(from, to);
}

/** Where a line of `text` ends from `start` (its CRLF), or text.length for the last line. */
export function lineEnd(text: string, start: number): number {
  const eol = text.indexOf('\r\n', start);
  return eol < 0 ? text.length : eol;
}
