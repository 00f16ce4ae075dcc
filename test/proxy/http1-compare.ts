// How the differential test of the proxy's response reader (http1-diff.test.ts) compares and
// looks at a stream: what the proxy should pass on of what llhttp read, the first difference
// between two outcomes, and views of a stream that neither parser gives (its heads split at
// CRLFCRLF, the final answer's fields, header lines to rename, chunk-size lines to rewrite).

import { HOP, connectionTokens } from '../../src/h1/index.js';
import type { Outcome, ReaderOutcome } from './http1-run.js';

/** Headers node's client (and so the reader) keeps one copy of, the first. */
const SINGLE = new Set([
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
]);

/**
 * What the proxy should pass on of the headers llhttp read: no hop-by-hop or Connection-named
 * ones, one copy of the single ones, none of the fields the test's rewrites renamed (RENAMED).
 */
export function passedOn(raw: string[], status: number): string[] {
  const named = connectionTokens(raw.filter((_, i) => i % 2 === 1 && raw[i - 1].toLowerCase() === 'connection'));
  const seen = new Set<string>();
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i].toLowerCase();
    if (HOP.has(n) || named.includes(n) || RENAMED.has(n) || (n === 'content-length' && status === 204)) continue;
    if (SINGLE.has(n) && seen.has(n)) continue;
    seen.add(n);
    out.push(raw[i], raw[i + 1]);
  }
  return out;
}

/** The first way the reader's outcome differs from llhttp's, or undefined when they agree. */
export function differ(L: Outcome, R: ReaderOutcome): string | undefined {
  if (L.error || R.error) return L.error && R.error ? undefined : 'refusal';
  if (L.status !== R.status) return 'status';
  if (JSON.stringify(passedOn(L.headers!, L.status!)) !== JSON.stringify(R.headers)) return 'headers';
  if (!L.body.equals(R.body)) return 'body';
  if (L.end === undefined) return R.endedIn ? 'end (llhttp read to the close)' : R.reusable ? 'reuse after a close' : undefined;
  if (R.endedIn?.[1] !== L.end) return 'end';
  return R.reusable === L.reusable ? undefined : 'reuse';
}

/** A stream as neither parser sees it: its heads split at CRLFCRLF, the final answer's fields. */
export interface View {
  bytes: Buffer;
  head: boolean;
  heads: { start: number; end: number }[];
  final: { start: number; end: number; status: number; fields: [string, string][] };
  /** No body whatever the headers say: HEAD, 204, 304. */
  bodiless: boolean;
}

export function view(bytes: Buffer, head: boolean): View {
  const hs = heads(bytes);
  const last = hs[hs.length - 1];
  const status = Number(bytes.toString('latin1', last.start + 9, last.start + 12));
  return {
    bytes,
    head,
    heads: hs,
    final: { ...last, status, fields: fields(bytes.toString('latin1', last.start, last.end)) },
    bodiless: head || status === 204 || status === 304,
  };
}

export const trimmed = (v: string) => v.replace(/^[ \t]+|[ \t]+$/g, '');
export const values = (v: View, name: string) => v.final.fields.filter(([n]) => n.toLowerCase() === name).map(([, x]) => trimmed(x));

/** Header lines of a head (start offsets of their names) whose name is `name` in any case. */
export function lines(b: Buffer, h: { start: number; end: number }, name: string): number[] {
  const out: number[] = [];
  for (let at = b.indexOf('\r\n', h.start, 'latin1'); at >= 0 && at + 2 < h.end; at = b.indexOf('\r\n', at + 2, 'latin1')) {
    if (b.toString('latin1', at + 2, at + 3 + name.length).toLowerCase() === `${name}:`) out.push(at + 2);
  }
  return out;
}
/** Names rewrites give to fields llhttp should not see (X in place of the first letter: same length). */
const RENAMED = new Set(['xontent-length', 'xransfer-encoding', 'xonnection']);
export const rename = (b: Buffer, at: number) => void (b[at] = 0x58);

/** The heads in a stream, split at CRLFCRLF: interim 1xx ones, then the final one (or what is left). */
export function heads(b: Buffer): { start: number; end: number }[] {
  const out: { start: number; end: number }[] = [];
  for (let at = 0; ;) {
    const e = b.indexOf('\r\n\r\n', at, 'latin1');
    out.push({ start: at, end: e < 0 ? b.length : e + 4 });
    if (e < 0 || !/^HTTP\/\d\.\d 1(?!01)\d\d/.test(b.toString('latin1', at, at + 12))) return out;
    at = e + 4;
  }
}

/** The (name, value) fields of a head's text, split at CRLF and the first colon. */
export function fields(head: string): [string, string][] {
  return head
    .split('\r\n')
    .slice(1)
    .filter((l) => l.includes(':'))
    .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1)]);
}

/**
 * Rewrites, in place, every chunk-size line of a chunked body from `start` into the form llhttp
 * takes, keeping its length: whitespace after the size becomes leading zeros, an extension ;aaa.
 */
export function walkChunks(b: Buffer, start: number): void {
  for (let at = start; ;) {
    const eol = b.indexOf('\r\n', at, 'latin1');
    const m = eol < 0 ? null : /^([0-9a-fA-F]+)([ \t]*)(;[^\r\n]*)?$/.exec(b.toString('latin1', at, eol));
    if (!m) return;
    const ext = m[3] ?? '';
    const pad = m[2].length + (ext.length === 1 ? 1 : 0);
    b.write('0'.repeat(pad) + m[1] + (ext.length > 1 ? ';' + 'a'.repeat(ext.length - 1) : ''), at, 'latin1');
    const size = parseInt(m[1], 16);
    if (size === 0) return; // trailers are left as they are
    at = eol + 2 + size + 2;
  }
}
