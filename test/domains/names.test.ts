// What a server's own domain may be (src/domains/names.ts): IDN names become punycode, case and a
// trailing dot are dropped, and everything that cannot carry a public certificate for a server —
// URLs, IP addresses, single labels, wildcards, special-use names, the service's own domain and
// the names under it — is refused with a 400 that says why.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { normalizeDomain, txtName } from '../../src/domains/index.js';
import { isAppError } from '../../src/errors.js';
import { statusOf } from '../../src/http/index.js';

const SERVICE = 'rootbox.example';

function refused(input: unknown, code: string, detail?: RegExp): void {
  try {
    const got = normalizeDomain(input, SERVICE);
    assert.unreachable(`${JSON.stringify(input)} was accepted as ${got}`);
  } catch (e) {
    if (!isAppError(e)) throw e;
    assert.is(e.code, code, `${JSON.stringify(input)}: ${e.detail}`);
    assert.is(statusOf(e.kind), 400);
    if (detail) assert.match(e.detail, detail);
  }
}

test('plain names are kept, lowercased, without a trailing dot', () => {
  assert.is(normalizeDomain('www.example.com', SERVICE), 'www.example.com');
  assert.is(normalizeDomain('  WWW.Example.COM.  ', SERVICE), 'www.example.com');
  assert.is(normalizeDomain('example.co.uk', SERVICE), 'example.co.uk');
  assert.is(normalizeDomain('a-b.c0.example', SERVICE), 'a-b.c0.example');
});

test('IDN names become punycode (the same name as the already-encoded form)', () => {
  assert.is(normalizeDomain('Bücher.example', SERVICE), 'xn--bcher-kva.example');
  assert.is(normalizeDomain('xn--bcher-kva.example', SERVICE), 'xn--bcher-kva.example');
  assert.is(normalizeDomain('例え.テスト', SERVICE), 'xn--r8jz45g.xn--zckzah');
  assert.is(normalizeDomain('www.ÄÖÜ.de', SERVICE), 'www.xn--4ca0bs.de');
});

test('the service domain and every name under it are refused as reserved_domain', () => {
  refused('rootbox.example', 'reserved_domain', /own domain/);
  refused('blog.rootbox.example', 'reserved_domain');
  refused('a.b.ROOTBOX.example.', 'reserved_domain');
  // a name that merely ends in the same letters is someone else's
  assert.is(normalizeDomain('notrootbox.example', SERVICE), 'notrootbox.example');
});

test('URLs, ports, paths, IPs, single labels, wildcards and bad labels are refused as invalid_domain', () => {
  refused('https://www.example.com/', 'invalid_domain', /without scheme/);
  refused('www.example.com:443', 'invalid_domain');
  refused('www.example.com/path', 'invalid_domain');
  refused('user@example.com', 'invalid_domain');
  refused('www example.com', 'invalid_domain');
  refused('[::1]', 'invalid_domain');
  refused('192.0.2.1', 'invalid_domain', /IP address/);
  refused('example', 'invalid_domain', /one label/);
  refused('*.example.com', 'invalid_domain', /wildcard/);
  refused('a..example.com', 'invalid_domain');
  refused('-a.example.com', 'invalid_domain');
  refused('a-.example.com', 'invalid_domain');
  refused('a_b.example.com', 'invalid_domain');
  refused(`${'a'.repeat(64)}.example.com`, 'invalid_domain');
  refused(`${'abcdefghi.'.repeat(25)}example.com`, 'invalid_domain', /253/);
  refused('', 'invalid_domain');
  refused(42, 'invalid_domain');
});

test('special-use names that no public CA signs are refused', () => {
  for (const n of ['foo.localhost', 'printer.local', 'x.invalid', '1.0.0.127.in-addr.arpa', 'abc.onion', 'db.internal'])
    refused(n, 'invalid_domain', /special-use/);
});

test('the ownership record lives at _rootbox.<domain>', () => {
  assert.is(txtName('www.example.com'), '_rootbox.www.example.com');
});

test.run();
