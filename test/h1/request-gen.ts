// Request heads for the differential test of the lane's request reader (src/h1/request.ts):
// mostly heads the lane takes (a bodiless GET or HEAD with one Host), each part odd or malformed
// with a small probability — methods, targets and versions, header names and values (OWS,
// obs-text, NUL and other control bytes, bare CR or LF inside a value), line ends (CRLF, bare LF,
// bare CR), obs-fold, Host missing or twice, the smuggling shapes (Content-Length and
// Transfer-Encoding together, duplicate or odd lengths, codings), Connection close/upgrade,
// Upgrade and Expect, huge heads and many fields — sometimes followed by more bytes (a pipelined
// request or garbage). Seeded: the same seed gives the same heads.

import { rng, type Rng } from '../helpers/rng.js';

export { rng, type Rng };

const pick = <T>(r: Rng, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];
const odd = (r: Rng, p: number) => r() < p;

const METHODS = ['GET', 'HEAD', 'POST', 'get', 'GET\t', 'PUT', 'OPTIONS', 'GETT', 'HEAD '];
const TARGETS = ['/', '/a/b?c=d', '/%20x', '/~u/!$&()*+,;=', '/a b', 'http://app.rbx.test/', '*', '/\x7f', '/\x80', '/a\tb', '//x', '/' + 'p'.repeat(300)];
const VERSIONS = ['HTTP/1.1', 'HTTP/1.0', 'HTTP/2.0', 'HTTP/1.1 ', 'http/1.1', 'HTTP/1.10', 'HTTP/1', 'HTTP/3.1'];
const NAMES = ['X-A', 'Accept', 'user-agent', 'X-Request-Id', 'Cookie', 'x_b', "!#$%&'*+-.^_`|~", 'If-None-Match', 'Accept-Encoding'];
const BAD_NAMES = ['Bad Name', 'X-A ', ' X-A', '', 'X\x00A', 'X\x7fA', 'X-\x80', 'X(A)', 'X:A', 'X@A', 'X\tA'];
const VALUES = ['v', '', 'a, b', '"q"', 'x=1; y=2', '*/*', 'tab\there', '\xe9t\xe9', '\xa0nbsp\xa0', '  padded  ', '\tt\t', 'a:b', 'UPPER lower'];
const BAD_VALUES = ['a\x00b', 'a\x01b', 'a\x7fb', 'a\x0bb', 'a\x0cb', 'a\rb', 'a\nb', 'a\r\n b', '\x1b[0m'];
const EOLS = ['\r\n', '\n', '\r'];
const LENGTHS = ['0', '5', ' 0 ', '00', '-0', '0, 0', '1e0', '0x0', '+0', '', '18446744073709551616'];
const CODINGS = ['chunked', 'identity', 'gzip, chunked', 'chunked, gzip', '', ' chunked', 'Chunked', 'x'];
const CONNECTIONS = ['close', 'keep-alive', 'Close', 'upgrade', 'close, upgrade', 'x-a, close', 'keep-alive, close', 'te', ''];

export interface GenCase {
  /** The bytes a client sends. */
  bytes: Buffer;
  /** What was made odd, for the failure message. */
  shape: string[];
}

/** One request head (and maybe what follows it). */
export function generate(r: Rng, host: string): GenCase {
  const shape: string[] = [];
  const mark = (s: string) => shape.push(s);
  const eol = () => (odd(r, 0.03) ? (mark('eol'), pick(r, EOLS.slice(1))) : '\r\n');
  const method = odd(r, 0.08) ? (mark('method'), pick(r, METHODS)) : pick(r, ['GET', 'GET', 'GET', 'HEAD']);
  const target = odd(r, 0.08) ? (mark('target'), pick(r, TARGETS)) : pick(r, ['/', '/index.html', '/a/b?c=d&e=f', '/img/x.png']);
  const version = odd(r, 0.05) ? (mark('version'), pick(r, VERSIONS)) : 'HTTP/1.1';
  let s = `${method} ${target} ${version}${eol()}`;
  const fields: Array<[string, string]> = [];
  const hosts = odd(r, 0.06) ? (mark('hosts'), pick(r, [0, 2])) : 1;
  for (let i = 0; i < hosts; i++)
    fields.push([pick(r, ['Host', 'host', 'HOST']), odd(r, 0.05) ? (mark('host'), pick(r, [` ${host} `, '', host + '\t', 'x y'])) : host]);
  const n = Math.floor(r() * 6);
  for (let i = 0; i < n; i++) {
    const name = odd(r, 0.04) ? (mark('name'), pick(r, BAD_NAMES)) : pick(r, NAMES);
    const value = odd(r, 0.05) ? (mark('value'), pick(r, BAD_VALUES)) : pick(r, VALUES);
    fields.push([name, value]);
  }
  if (odd(r, 0.08)) (mark('length'), fields.push([pick(r, ['Content-Length', 'content-length']), pick(r, LENGTHS)]));
  if (odd(r, 0.04)) (mark('length twice'), fields.push(['Content-Length', pick(r, LENGTHS)]));
  if (odd(r, 0.06)) (mark('coding'), fields.push([pick(r, ['Transfer-Encoding', 'transfer-encoding', 'Transfer-Encoding ']), pick(r, CODINGS)]));
  if (odd(r, 0.1)) (mark('connection'), fields.push([pick(r, ['Connection', 'connection']), pick(r, CONNECTIONS)]));
  if (odd(r, 0.03)) (mark('upgrade'), fields.push(['Upgrade', 'websocket']));
  if (odd(r, 0.03)) (mark('expect'), fields.push(['Expect', pick(r, ['100-continue', 'x'])]));
  if (odd(r, 0.01)) (mark('huge'), fields.push(['X-Big', 'b'.repeat(pick(r, [16_000, 17_000, 40_000]))]));
  if (odd(r, 0.01)) {
    mark('many');
    for (let i = 0; i < 101; i++) fields.push([`X-${i}`, 'v']);
  }
  // shuffle a little, so Host and the framing fields are not always first
  for (let i = fields.length - 1; i > 0; i--) if (odd(r, 0.3)) [fields[i], fields[i - 1]] = [fields[i - 1], fields[i]];
  for (const [name, value] of fields) {
    const ows = odd(r, 0.1) ? pick(r, ['', '  ', '\t', ' \t ']) : ' ';
    const trail = odd(r, 0.05) ? pick(r, [' ', '\t', ' \t']) : '';
    s += `${name}:${ows}${value}${trail}${eol()}`;
    if (odd(r, 0.02)) (mark('fold'), (s += `${pick(r, [' ', '\t'])}folded${eol()}`));
  }
  s += eol();
  if (odd(r, 0.15)) (mark('then'), (s += pick(r, [`GET /next HTTP/1.1\r\nHost: ${host}\r\n\r\n`, 'garbage', '\r\n', 'G'])));
  if (odd(r, 0.03)) (mark('cut'), (s = s.slice(0, Math.floor(r() * s.length))));
  return { bytes: Buffer.from(s, 'latin1'), shape };
}
