// Every answer of the edge is {error, detail} JSON, including the ones node's HTTP/1.1 parser
// makes itself (bare 400s with empty bodies before), and the host a request names is read as
// RFC 9112 §3.2 says: one Host only, and an absolute-form target's authority wins over it.
// Raw bytes over real sockets (plain and TLS) against a real daemon.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect as h2connect } from 'node:http2';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { exchange, type Answer } from '../edge/clients.js';

let d: TestDaemon;
test.before(async () => {
  d = await startTestDaemon();
});
test.after(async () => d?.stop());

const send = (payload: string | Buffer, tls = false) =>
  exchange(tls ? d.https : d.http, payload, tls ? { tls: { ca: d.ca, servername: 'api.localhost' } } : {});

function isJsonError(a: Answer, status: number, error: string, label: string): void {
  assert.is(a.status, status, `${label}: ${a.text.slice(0, 200)}`);
  assert.match(a.headers['content-type'] ?? '', /^application\/json/, label);
  assert.is(a.headers.connection, 'close', label);
  const body = JSON.parse(a.body);
  assert.is(body.error, error, label);
  assert.type(body.detail, 'string', label);
  assert.ok(body.detail.length > 10, label);
  assert.ok(a.closed, `${label}: the connection is closed after the answer`);
}

test("what node's HTTP/1.1 parser refuses is answered with {error, detail} and Connection: close", async () => {
  const H = 'Host: api.localhost\r\n';
  const cases: [string, string | Buffer, number, string][] = [
    ['oversized head', `GET /healthz HTTP/1.1\r\n${H}X-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'header_too_large'],
    ['unknown method', `FROB /healthz HTTP/1.1\r\n${H}\r\n`, 501, 'unknown_method'],
    ['invalid header characters', `GET /healthz HTTP/1.1\r\n${H}X-Bad: a\x01b\r\n\r\n`, 400, 'invalid_header'],
    ['space before the colon', `GET /healthz HTTP/1.1\r\n${H}X-Bad : a\r\n\r\n`, 400, 'invalid_header'],
    [
      'Content-Length beside Transfer-Encoding',
      `POST /feedback HTTP/1.1\r\n${H}Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
      400,
      'invalid_framing',
    ],
    ['Content-Length not a number', `POST /feedback HTTP/1.1\r\n${H}Content-Length: 1x\r\n\r\n`, 400, 'invalid_framing'],
    ['bad chunk size', `POST /feedback HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\nzz\r\n`, 400, 'invalid_framing'],
    ['unsupported version', `GET /healthz HTTP/3.0\r\n${H}\r\n`, 505, 'version_not_supported'],
    ['HTTP/2 preface on the plain port', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 505, 'version_not_supported'],
    ['a TLS hello on the plain port', Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03]), 400, 'bad_request'],
    ['control bytes for a method', '\x00\x01 nonsense\r\n\r\n', 400, 'bad_request'],
    ['a request target with a space', `GET /a b HTTP/1.1\r\n${H}\r\n`, 400, 'bad_request'],
  ];
  for (const [label, payload, status, error] of cases) isJsonError(await send(payload), status, error, label);
  isJsonError(
    await send(`GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, true),
    431,
    'header_too_large',
    'oversized head over TLS',
  );
  assert.is((await send('GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n')).status, 200);
});

test('an HTTP/1.1 request without Host gets a 400 {error, detail}', async () => {
  const a = await send('GET /healthz HTTP/1.1\r\n\r\n');
  assert.is(a.status, 400);
  assert.is(JSON.parse(a.body).error, 'missing_host');
});

test('duplicate Host headers are refused with 400 duplicate_host, even when equal, and the connection is closed', async () => {
  for (const second of ['verify.localhost', 'api.localhost', 'API.localhost']) {
    const a = await send(`GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nX-Other: 1\r\nHost: ${second}\r\n\r\n`);
    isJsonError(a, 400, 'duplicate_host', `second Host ${second}`);
  }
  isJsonError(await send('GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nHost: verify.localhost\r\n\r\n', true), 400, 'duplicate_host', 'over TLS');
});

test('an HTTP/2 request whose Host differs from its :authority is refused with 400 conflicting_host', async () => {
  const session = h2connect(`https://127.0.0.1:${d.https}`, { ca: d.ca, servername: 'api.localhost' });
  try {
    const ask = (headers: Record<string, string>) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const r = session.request({ ':path': '/healthz', ':authority': 'api.localhost', ...headers });
        let body = '';
        r.setEncoding('utf8');
        r.on('response', (h) => r.on('end', () => resolve({ status: Number(h[':status']), body })));
        r.on('data', (c) => (body += c));
        r.on('error', reject);
      });
    const bad = await ask({ host: 'verify.localhost' });
    assert.is(bad.status, 400);
    assert.is(JSON.parse(bad.body).error, 'conflicting_host');
    assert.is((await ask({ host: 'api.localhost' })).status, 200);
    assert.is((await ask({})).status, 200);
  } finally {
    session.close();
  }
});

test('an absolute-form target routes by its authority, which wins over the Host header (RFC 9112 §3.2.2)', async () => {
  const api = await send('GET http://api.localhost/healthz HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n');
  assert.is(api.status, 200, api.text);
  assert.equal(JSON.parse(api.body), { ok: true, service: 'rootbox' });
  const verify = await send(`GET http://verify.localhost:${d.http}/healthz?x=1 HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n`);
  assert.equal(JSON.parse(verify.body), { ok: true, service: 'rootbox-verify' });
  const noHost = await send('GET HTTPS://API.LOCALHOST/healthz HTTP/1.1\r\nConnection: close\r\n\r\n');
  assert.equal(JSON.parse(noHost.body), { ok: true, service: 'rootbox' });
  const overTls = await send('GET https://verify.localhost/healthz HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n', true);
  assert.is(JSON.parse(overTls.body).service, 'rootbox-verify');
  const unknown = await send('GET http://elsewhere.example/healthz HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n');
  assert.is(unknown.status, 404);
  assert.is(JSON.parse(unknown.body).error, 'unknown_host');
  for (const target of ['ftp://api.localhost/healthz', 'http://user@api.localhost/healthz', 'http:///healthz']) {
    isJsonError(await send(`GET ${target} HTTP/1.1\r\nHost: api.localhost\r\n\r\n`), 400, 'invalid_target', target);
  }
});

test('CONNECT and an unknown Expect get {error, detail} answers', async () => {
  isJsonError(await send('CONNECT api.localhost:443 HTTP/1.1\r\nHost: api.localhost:443\r\n\r\n'), 405, 'method_not_allowed', 'CONNECT');
  isJsonError(await send('GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nExpect: 200-ok\r\n\r\n'), 417, 'expectation_failed', 'Expect');
});

test.run();
