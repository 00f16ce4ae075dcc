// The error catalogue (src/catalogue.ts) against the source: each code listed once under the
// heading of its kind's status, every code src/ raises or writes is listed (the types refuse an
// unknown code at AppError.of; this scan also covers codes written as plain `error:` fields), and
// every listed code is raised somewhere.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { AppError, CATALOGUE, isErrorCode, type ErrorCode, type ErrorKind } from '../../src/errors.js';
import { statusOf } from '../../src/http/index.js';
import { tooMany } from '../../src/ratelimit.js';

const root = new URL('../..', import.meta.url).pathname;
const catalogueFile = join(root, 'src/catalogue.ts');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? sources(p) : n.endsWith('.ts') ? [p] : [];
  });
}
const files = sources(join(root, 'src')).filter((f) => f !== catalogueFile);
const text = new Map(files.map((f) => [relative(root, f), readFileSync(f, 'utf8')]));

// never called: these lines only have to fail to compile (npm run check type-checks the tests)
export function refusedByTheTypes(): void {
  // @ts-expect-error a code missing from the catalogue
  AppError.of('no_such_code', 'x');
  // @ts-expect-error a kind the catalogue does not give the code
  AppError.of('port_limit', 'x', { kind: 'not_found' });
  // @ts-expect-error the long form checks the kind against the code too
  new AppError('not_found', 'port_limit', 'x');
  // @ts-expect-error a 429 is built only for rate-limit codes
  tooMany('port_limit', 'x', 1);
}

test('each code is listed once, under the heading of its status and kind', () => {
  const lines = readFileSync(catalogueFile, 'utf8').split('\n');
  const seen = new Set<string>();
  let heading: { status: number; kind: string } | undefined;
  let entries = 0;
  for (const line of lines) {
    const h = /^\s*\/\/ ── (\d{3}) ([a-z_]+)[ :]/.exec(line);
    if (h) heading = { status: Number(h[1]), kind: h[2] };
    const m = /^\s+([a-z0-9_]+): e\('([a-z_]+)'/.exec(line);
    if (!m) continue;
    entries++;
    const [, code, kind] = m;
    assert.not.ok(seen.has(code), `${code} is listed twice`);
    seen.add(code);
    assert.ok(heading, `${code} is listed before any heading`);
    assert.is(kind, heading!.kind, `${code} (${kind}) sits under the ${heading!.kind} heading`);
    assert.is(
      statusOf(kind as ErrorKind),
      heading!.status,
      `${code}: the heading says ${heading!.status}, src/http/errors.ts maps ${kind} to ${statusOf(kind as ErrorKind)}`,
    );
    assert.is(CATALOGUE[code as ErrorCode].kind, kind);
  }
  assert.is(entries, Object.keys(CATALOGUE).length, 'every entry of CATALOGUE is on a line of its own');
  assert.ok(entries > 100, `${entries} codes`);
});

test('every kind has a status, and a code with other kinds keeps each of them distinct', () => {
  for (const [code, entry] of Object.entries(CATALOGUE)) {
    const kinds: readonly ErrorKind[] = [entry.kind, ...entry.also];
    assert.is(new Set(kinds).size, kinds.length, code);
    for (const k of kinds) assert.ok(statusOf(k) >= 300 && statusOf(k) < 600, `${code}: ${k} → ${statusOf(k)}`);
    assert.ok(entry.about.length > 10, `${code} says what it means`);
  }
});

test('every error code written in src/ is in the catalogue', () => {
  // AppError.of('x', …), new AppError('kind', 'x', …), tooMany('x', …), the payment helpers'
  // reject/fail('x', …), and plain `error: 'x'` fields of a body built by hand
  const patterns = [
    /AppError\.of\(\s*'([a-z0-9_]+)'/g,
    /new AppError\(\s*'[a-z_]+',\s*'([a-z0-9_]+)'/g,
    /\btooMany\(\s*'([a-z0-9_]+)'/g,
    /\b(?:reject|fail|challenge)\(\s*'([a-z0-9_]+)'/g,
    /\berror:\s*'([a-z0-9_]+)'/g,
  ];
  const unknown: string[] = [];
  let found = 0;
  for (const [file, src] of text) {
    for (const re of patterns) {
      for (const m of src.matchAll(re)) {
        found++;
        if (!isErrorCode(m[1])) unknown.push(`${file}: ${m[1]}`);
      }
    }
    // the long form's kind must be one the catalogue gives its code
    for (const m of src.matchAll(/new AppError\(\s*'([a-z_]+)',\s*'([a-z0-9_]+)'/g)) {
      if (!isErrorCode(m[2])) continue;
      const e = CATALOGUE[m[2]];
      const kinds: readonly string[] = [e.kind, ...e.also];
      assert.ok(kinds.includes(m[1]), `${file}: ${m[2]} raised as ${m[1]}, the catalogue says ${kinds.join(' or ')}`);
    }
  }
  assert.equal(unknown, [], `codes missing from src/catalogue.ts: ${unknown.join(', ')}`);
  assert.ok(found > 100, `the scan found ${found} uses`);
});

test('every catalogue code is raised somewhere in src/', () => {
  const all = [...text.values()].join('\n');
  const unused = Object.keys(CATALOGUE).filter((c) => !all.includes(`'${c}'`));
  assert.equal(unused, [], `listed but never raised: ${unused.join(', ')}`);
});

test('AppError.of takes the kind from the catalogue, or one of its others when named', () => {
  assert.is(AppError.of('port_limit', 'x').kind, 'forbidden');
  assert.is(AppError.of('unknown_host', 'x').kind, 'not_found');
  assert.is(AppError.of('unknown_host', 'x', { kind: 'misdirected' }).kind, 'misdirected');
  const t = tooMany('sms_rate_limited', 'too many codes', 2.2);
  assert.is(t.kind, 'rate_limited');
  assert.is(t.retryAfter, 3);
  assert.is(t.detail, 'too many codes; retry in 3 s');
});

test.run();
