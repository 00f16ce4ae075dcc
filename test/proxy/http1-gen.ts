// Generated HTTP/1.1 response byte streams for the differential test of the proxy's response
// reader (http1-diff.test.ts): optional interim 1xx answers, a status line, headers and a framed
// body, then whatever follows on the connection. Most parts are valid; each part turns invalid
// or odd with a small probability (versions, codes, reason bytes, header names and values,
// obs-fold, bare CR/LF, Content-Length forms, Transfer-Encoding lists, chunk sizes, extensions,
// trailers, 204/304/HEAD bodies, huge heads) and a few streams get a random byte mutated.
// Everything comes from one seeded PRNG, so a seed and a case number reproduce a stream.

export interface Rng {
  /** A float in [0, 1). */
  next(): number;
  /** An integer in [0, n). */
  int(n: number): number;
  pick<T>(items: readonly T[]): T;
  chance(p: number): boolean;
}

/** mulberry32: small, fast, and the same sequence everywhere for a seed. */
export function rng(seed: number): Rng {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  return { next, int, pick: (items) => items[int(items.length)], chance: (p) => next() < p };
}

export interface GenCase {
  bytes: Buffer;
  /** The request was HEAD (its answer has no body whatever the headers say). */
  head: boolean;
  /** What the generator chose, for the failure message. */
  notes: string[];
}

const TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const VCHAR = Array.from({ length: 94 }, (_, i) => String.fromCharCode(33 + i)).join('');
const ODD = ['\0', '\x01', '\x0b', '\x0c', '\x1f', '\x7f', '\x80', '\x85', '\xa0', '\xe9', '\xff', '\r', '\n', '\t', ' '];

function str(r: Rng, n: number, alphabet: string): string {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = alphabet.charCodeAt(r.int(alphabet.length));
  return b.toString('latin1');
}
const recase = (r: Rng, s: string) => r.pick([s, s.toLowerCase(), s.toUpperCase(), s]);
const ows = (r: Rng) => (r.chance(0.85) ? r.pick(['', ' ', ' ']) : r.pick(['  ', '\t', ' \t', '\t ']));

/** A line ending: CRLF, now and then a bare LF, a bare CR or worse. */
function eol(r: Rng, notes: string[], p = 0.015): string {
  if (!r.chance(p)) return '\r\n';
  const e = r.pick(['\n', '\r', '\r\r\n', '\n\r', '\r\n ']);
  notes.push(`eol ${JSON.stringify(e)}`);
  return e;
}

/** An odd but mostly legal field value, or one with bytes a parser must refuse. */
function value(r: Rng, notes: string[]): string {
  if (r.chance(0.9))
    return r.pick([
      '1',
      'text/html; charset=utf-8',
      'a=b; Path=/; HttpOnly',
      'max-age=0',
      '"etag-1"',
      '</a.css>; rel=preload',
      '',
      'x, y',
      'caf\xe9',
      'a\tb',
      str(r, 1 + r.int(40), VCHAR + ' '),
    ]);
  const bad = r.pick(ODD);
  const v = r.pick([`${bad}v`, `v${bad}`, `a${bad}b`, `${bad}`]);
  notes.push(`value ${JSON.stringify(v)}`);
  return v;
}

function name(r: Rng, notes: string[]): string {
  if (r.chance(0.97))
    return recase(
      r,
      r.pick([
        'X-A',
        'X-Custom',
        'Server',
        'Date',
        'Content-Type',
        'Cache-Control',
        'Set-Cookie',
        'Vary',
        'Location',
        'ETag',
        'Link',
        'X-Request-Id',
        'Keep-Alive',
        'Upgrade',
        'Proxy-Connection',
        'TE',
        'Trailer',
        'Proxy-Authenticate',
        'Http2-Settings',
        'Age',
        str(r, 1 + r.int(12), TCHAR),
      ]),
    );
  const n = r.pick(['Na me', 'Na(me', 'Na\0me', 'N\xe4me', '', '@', 'X-A ', ' X-A', 'X-A\t', 'Na"me', 'X:A']);
  notes.push(`name ${JSON.stringify(n)}`);
  return n;
}

/** One header line (with its line ending); sometimes folded, spaced before the colon or huge. */
function line(r: Rng, notes: string[], n: string, v: string): string {
  let colon = ':';
  if (r.chance(0.01)) notes.push(`space before colon in ${(colon = r.pick([' :', '\t:']))}`);
  if (r.chance(0.005)) notes.push(`no colon after ${JSON.stringify((colon = ''))}${n}`);
  let out = `${n}${colon}${ows(r)}${v}${ows(r)}${eol(r, notes)}`;
  if (r.chance(0.01)) {
    notes.push('obs-fold');
    out += `${r.pick([' ', '\t'])}continued${eol(r, notes)}`;
  }
  return out;
}

function headers(r: Rng, notes: string[]): string {
  let out = '';
  for (let i = r.int(5); i > 0; i--) out += line(r, notes, name(r, notes), value(r, notes));
  if (r.chance(0.2)) {
    const c = r.pick([
      'close',
      'keep-alive',
      'Keep-Alive',
      'CLOSE',
      'x-a',
      'x-a, close',
      'keep-alive, x-custom',
      'upgrade',
      'closed',
      'close;',
      'close , keep-alive',
      '',
      ',close',
      'keep-alive, close',
      'Upgrade, X-A',
    ]);
    notes.push(`connection ${JSON.stringify(c)}`);
    out += line(r, notes, recase(r, 'Connection'), c);
  }
  if (r.chance(0.015)) {
    const n = r.chance(0.3) ? 10_000 + r.int(30_000) : 60_000 + r.int(12_000);
    notes.push(`huge value ${n}`);
    out += line(r, notes, 'X-Huge', str(r, n, VCHAR));
  }
  if (r.chance(0.004)) {
    notes.push('600 headers');
    for (let i = 0; i < 600; i++) out += `X-Many-${i}: ${str(r, 100, VCHAR)}\r\n`;
  }
  return out;
}

function statusLine(r: Rng, notes: string[], code: string): string {
  let version = r.chance(0.9) ? 'HTTP/1.1' : 'HTTP/1.0';
  if (r.chance(0.02))
    notes.push(
      `version ${(version = r.pick(['HTTP/1.2', 'HTTP/2.0', 'HTTP/0.9', 'http/1.1', 'HTTP/1.1 ', 'HTTP/11', 'HTTP /1.1', 'HTTP/1.1\t', 'HTTP/1.a', 'ICY', 'HTTP/1.10', 'HTTP/2']))}`,
    );
  let reason = ' ' + r.pick(['OK', 'Fine', 'Not Found', 'Whatever It Says', 'caf\xe9', 'a\tb']);
  if (r.chance(0.1)) reason = r.pick(['', ' ']);
  if (r.chance(0.03)) notes.push(`reason ${JSON.stringify((reason = ` O${r.pick(ODD)}K`))}`);
  return `${version} ${code}${reason}${eol(r, notes)}`;
}

function code(r: Rng, notes: string[]): string {
  if (r.chance(0.9)) return String(r.pick([200, 200, 200, 201, 204, 206, 301, 304, 404, 500, 503]));
  if (r.chance(0.5)) return String(100 + r.int(900));
  const c = r.pick(['20', '2000', '0200', ' 200', 'abc', '2OO', '099', '000', '-20']);
  notes.push(`code ${JSON.stringify(c)}`);
  return c;
}

function body(r: Rng, big = false): string {
  const n = big || r.chance(0.03) ? r.int(3000) : r.int(40);
  const parts = ['\r\n', '0\r\n\r\n', 'HTTP/1.1 200 OK\r\n', 'x'];
  let out = '';
  while (out.length < n) out += r.chance(0.1) ? r.pick(parts) : str(r, 1 + r.int(16), VCHAR + '\xe9\0');
  return out.slice(0, n);
}

function contentLength(r: Rng, notes: string[], n: number): string {
  if (r.chance(0.9)) return r.chance(0.05) ? `00${n}` : String(n);
  const v = r.pick([
    `+${n}`,
    `-${n}`,
    `0x${n.toString(16)}`,
    `${n} ${n}`,
    `${n},${n}`,
    `${n}, ${n}`,
    '',
    `${n}.0`,
    `${n}e0`,
    `${n}\xa0`,
    `\x0b${n}`,
    `${n}\0`,
    '9'.repeat(16),
    '0'.repeat(16) + n,
    '0'.repeat(14) + n,
    `${n}a`,
  ]);
  notes.push(`content-length ${JSON.stringify(v)}`);
  return v;
}

/** A chunked body: data chunks, last chunk, trailers; any part may be malformed. */
function chunked(r: Rng, notes: string[]): string {
  let out = '';
  const bad = (p: number, what: string, good: string, alts: string[]) => {
    if (!r.chance(p)) return good;
    const v = r.pick(alts);
    notes.push(`${what} ${JSON.stringify(v)}`);
    return v;
  };
  const ext = () =>
    r.chance(0.15)
      ? bad(0.3, 'chunk ext', r.pick([';a', ';a=b', ';a="b c"', ';a=b;c=d']), [
          ' ;a=b',
          '\t;a',
          '; a',
          ';a=\x01',
          ';\xff',
          ';a="\\"q"',
          ';',
          ';=b',
          ';a=',
          ';a\n',
          ';a\rb',
          ';' + 'e'.repeat(5000),
        ])
      : '';
  for (let i = r.int(4); i >= 0; i--) {
    const data = body(r);
    if (data.length === 0) continue;
    let size = data.length.toString(16);
    size = r.chance(0.3) ? size.toUpperCase() : size;
    if (r.chance(0.05)) size = '0'.repeat(1 + r.int(14)) + size;
    size = bad(0.03, 'chunk size', size, [
      '',
      'g',
      `-${size}`,
      `0x${size}`,
      ` ${size}`,
      `${size} `,
      `${size}\t`,
      `${size}\0`,
      'f'.repeat(17),
      `1${'0'.repeat(12)}`,
    ]);
    out += `${size}${ext()}${eol(r, notes, 0.01)}${data}${bad(0.02, 'after data', '\r\n', ['', '\n', 'XX', '\r', '\r\r\n'])}`;
  }
  if (r.chance(0.03)) {
    notes.push('no last chunk');
    return out;
  }
  out += `${r.chance(0.1) ? '000' : '0'}${ext()}${eol(r, notes, 0.01)}`;
  for (let i = r.chance(0.2) ? 1 + r.int(2) : 0; i > 0; i--) out += line(r, notes, name(r, notes), value(r, notes));
  return out + bad(0.02, 'end of trailers', '\r\n', ['', '\n', '\r', 'X']);
}

/** What the app sends after the answer: nothing, a next answer, garbage. */
function after(r: Rng): string {
  return r.pick([
    '',
    '',
    '',
    'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi',
    'HTTP/1.1 302 Found\r\nLocation: /evil\r\n\r\n',
    'garbage\r\n\r\n',
    '\r\n',
    '0\r\n\r\n',
  ]);
}

export function generate(r: Rng): GenCase {
  const notes: string[] = [];
  const head = r.chance(0.08);
  if (head) notes.push('HEAD');
  let s = '';
  for (let i = r.chance(0.08) ? 1 + r.int(2) : 0; i > 0; i--) {
    const c = r.pick(['100', '102', '103', '199', '101']);
    notes.push(`interim ${c}`);
    s +=
      statusLine(r, notes, c) +
      (c === '103' ? 'Link: </a.css>; rel=preload\r\n' : '') +
      (r.chance(0.1) ? 'Content-Length: 3\r\n' : '') +
      headers(r, notes) +
      eol(r, notes);
  }
  const status = code(r, notes);
  s += statusLine(r, notes, status) + headers(r, notes);
  const framing = r.pick(['length', 'length', 'length', 'chunked', 'chunked', 'chunked', 'close', 'both', 'other-te']);
  notes.push(framing);
  let payload = '';
  const te = () => {
    let v = 'chunked';
    if (r.chance(0.15))
      v = r.pick([
        'Chunked',
        'CHUNKED',
        'chunked ',
        'chunked,',
        ',chunked',
        'chunked, chunked',
        'gzip, chunked',
        'chunked, gzip',
        'chunked;q=1',
        'chunked\x0b',
        'chunked\xa0',
        'identity, chunked',
      ]);
    if (framing === 'other-te') v = r.pick(['gzip', 'identity', 'deflate', 'chunk', 'xchunked', '']);
    notes.push(`transfer-encoding ${JSON.stringify(v)}`);
    return line(r, notes, recase(r, 'Transfer-Encoding'), v) + (r.chance(0.04) ? line(r, notes, 'Transfer-Encoding', r.pick(['chunked', 'gzip'])) : '');
  };
  if (framing === 'length' || framing === 'both') {
    const data = body(r);
    const cl = contentLength(r, notes, data.length);
    let h = line(r, notes, recase(r, 'Content-Length'), cl);
    if (r.chance(0.08)) {
      const again = r.pick([cl, ` ${cl}`, String(data.length + 1), '0']);
      notes.push(`second content-length ${JSON.stringify(again)}`);
      h += line(r, notes, 'Content-Length', again);
    }
    if (framing === 'both') s += r.chance(0.5) ? h + te() : te() + h;
    else s += h;
    payload = framing === 'both' ? chunked(r, notes) : data;
    if (r.chance(0.05)) notes.push(`body cut to ${(payload = payload.slice(0, r.int(payload.length + 1))).length}`);
  } else if (framing === 'chunked') {
    s += te();
    payload = chunked(r, notes);
  } else {
    if (framing === 'other-te') s += te();
    payload = body(r);
  }
  s += eol(r, notes, 0.01);
  // HEAD, 1xx, 204 and 304 answers have no body: what follows is usually nothing, sometimes a body anyway
  const bodiless = head || status === '204' || status === '304';
  if (!bodiless || r.chance(0.3)) s += payload;
  s += after(r);
  const bytes = Buffer.from(s, 'latin1');
  return { bytes: r.chance(0.04) ? mutate(r, bytes, notes) : bytes, head, notes };
}

/** One byte of the head replaced, inserted or removed. */
function mutate(r: Rng, b: Buffer, notes: string[]): Buffer {
  const headEnd = b.indexOf('\r\n\r\n');
  const at = r.int(Math.max(1, headEnd < 0 ? b.length : headEnd + 4));
  const byte = r.chance(0.7) ? r.pick([0, 9, 10, 13, 32, 44, 58, 59, 127, 128, 160, 255]) : r.int(256);
  const op = r.pick(['replace', 'insert', 'delete']);
  notes.push(`${op} byte ${byte} at ${at}`);
  if (op === 'replace') return Buffer.concat([b.subarray(0, at), Buffer.from([byte]), b.subarray(at + 1)]);
  if (op === 'insert') return Buffer.concat([b.subarray(0, at), Buffer.from([byte]), b.subarray(at)]);
  return Buffer.concat([b.subarray(0, at), b.subarray(at + 1)]);
}
