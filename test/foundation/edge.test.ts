import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect } from 'node:http2';
import { request as httpRequest } from 'node:http';
import { Socket } from 'node:net';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

let d: TestDaemon;
let caFile: string;
test.before(async () => {
  d = await startTestDaemon();
  caFile = join(d.dataDir, 'tls', 'ca.pem');
});
test.after(async () => d?.stop());

const curl = async (args: string[]) => {
  const r = await run('curl', ['-sS', '--max-time', '10', '-w', '\n%{http_code} %{http_version}', ...args]);
  const lines = r.stdout.trimEnd().split('\n');
  const [code, version] = lines.pop()!.split(' ');
  return { status: Number(code), version, body: lines.join('\n'), stderr: r.stderr };
};
const https = (host: string, path: string, extra: string[] = []) =>
  curl(['--cacert', caFile, '--resolve', `${host}:${d.https}:127.0.0.1`, ...extra, `https://${host}:${d.https}${path}`]);
const http = (host: string, path: string, extra: string[] = []) =>
  curl(['--resolve', `${host}:${d.http}:127.0.0.1`, ...extra, `http://${host}:${d.http}${path}`]);

test('curl verifies the generated certificate for the apex, api. and a random slug over HTTP/2 and HTTP/1.1', async () => {
  const slug = `s${Math.random().toString(36).slice(2, 10)}`;
  for (const host of ['localhost', 'api.localhost', 'verify.localhost', `${slug}.localhost`]) {
    for (const v of ['--http2', '--http1.1']) {
      const r = await https(host, '/healthz', [v]);
      assert.ok(r.status > 0, `${host} ${v}: TLS failed: ${r.stderr}`);
      assert.is(r.version, v === '--http2' ? '2' : '1.1', host);
    }
  }
});

test('Host dispatch: hosting on apex and api., verification on verify., proxy on slugs', async () => {
  assert.equal(JSON.parse((await https('api.localhost', '/healthz')).body), { ok: true, service: 'rootbox' });
  assert.equal(JSON.parse((await https('localhost', '/healthz')).body), { ok: true, service: 'rootbox' });
  assert.equal(JSON.parse((await http('verify.localhost', '/healthz')).body), { ok: true, service: 'rootbox-verify' });
  const slug = await https('nosuch.localhost', '/');
  assert.is(slug.status, 404);
  assert.is(JSON.parse(slug.body).error, 'unknown_server');
});

test('unknown hosts get 421 over HTTPS and 404 over HTTP, with an error body', async () => {
  const a = await curl([
    '--cacert',
    caFile,
    '--resolve',
    `localhost:${d.https}:127.0.0.1`,
    '-H',
    'Host: other.example',
    `https://localhost:${d.https}/healthz`,
    '--http1.1',
  ]);
  assert.is(a.status, 421);
  assert.is(JSON.parse(a.body).error, 'unknown_host');
  const b = await http('other.example', '/healthz');
  assert.is(b.status, 404);
  assert.match(JSON.parse(b.body).detail, /api\.localhost/);
});

test("Node's http2 client reaches every host with SNI and a verified certificate", async () => {
  for (const host of ['api.localhost', 'verify.localhost']) {
    const session = connect(`https://127.0.0.1:${d.https}`, { ca: d.ca, servername: host });
    try {
      const body = await new Promise<string>((resolve, reject) => {
        const req = session.request({ ':path': '/healthz', ':authority': host });
        let data = '';
        req.setEncoding('utf8');
        req.on('data', (c) => (data += c));
        req.on('end', () => resolve(data));
        req.on('error', reject);
      });
      assert.ok(JSON.parse(body).ok, host);
    } finally {
      session.close();
    }
  }
});

test('malformed requests map to 400/404/405/413/415 with {error, detail} and the daemon keeps serving', async () => {
  const post = (body: string, type = 'application/json') =>
    http('api.localhost', '/feedback', ['-X', 'POST', '-H', `content-type: ${type}`, '--data-binary', body]);
  const cases: [Promise<{ status: number; body: string }>, number, string][] = [
    [post('{"message": '), 400, 'invalid_json'],
    [post('message=hi', 'application/x-www-form-urlencoded'), 415, 'unsupported_media_type'],
    [post(JSON.stringify({ message: 'x'.repeat(20_000) })), 413, 'body_too_large'],
    [post(JSON.stringify({ message: 42 })), 400, 'invalid_request'],
    [http('api.localhost', '/nope'), 404, 'not_found'],
    [http('api.localhost', '/feedback'), 405, 'method_not_allowed'],
  ];
  for (const [p, status, code] of cases) {
    const r = await p;
    assert.is(r.status, status, r.body);
    const body = JSON.parse(r.body);
    assert.is(body.error, code);
    assert.type(body.detail, 'string');
  }
  assert.is((await https('api.localhost', '/healthz')).status, 200);
});

test('garbage on the wire gets an {error, detail} answer (an unknown method: 501) and does not disturb other clients', async () => {
  const sock = new Socket();
  const answer = await new Promise<string>((resolve) => {
    let data = '';
    sock.connect(d.http, '127.0.0.1', () => sock.write('GARBAGE \x00\x01 nonsense\r\n\r\n'));
    sock.on('data', (c) => (data += c));
    sock.on('close', () => resolve(data));
    sock.on('error', () => resolve(data));
  });
  assert.match(answer, /^HTTP\/1\.1 501/);
  assert.is(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)).error, 'unknown_method');
  assert.is((await http('api.localhost', '/healthz')).status, 200);
});

test('a request without Host is refused with 400', async () => {
  const status = await new Promise<number>((resolve, reject) => {
    const sock = new Socket();
    let data = '';
    sock.connect(d.http, '127.0.0.1', () => sock.write('GET /healthz HTTP/1.0\r\n\r\n'));
    sock.on('data', (c) => (data += c));
    sock.on('close', () => resolve(Number(data.split(' ')[1])));
    sock.on('error', reject);
  });
  assert.is(status, 400);
});

test('feedback is stored and answered with ok', async () => {
  const r = await http('api.localhost', '/feedback', [
    '-H',
    'content-type: application/json',
    '--data-binary',
    JSON.stringify({ message: 'works', contact: 'me@example.com' }),
  ]);
  assert.is(r.status, 200);
  assert.equal(JSON.parse(r.body), { ok: true });
  assert.is(d.daemon.store.feedback.list(1)[0].message, 'works');
});

test('the request id is echoed and a client-supplied sane id is kept', async () => {
  const r = await run('curl', [
    '-si',
    '-H',
    'x-request-id: test-req-12345',
    '--resolve',
    `api.localhost:${d.http}:127.0.0.1`,
    `http://api.localhost:${d.http}/healthz`,
  ]);
  assert.match(r.stdout, /x-request-id: test-req-12345/i);
});

test('WebSocket upgrades for a slug reach the proxy dispatcher; others are refused', async () => {
  const status = await new Promise<number>((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: d.http, path: '/', headers: { host: 'api.localhost', connection: 'Upgrade', upgrade: 'websocket' } });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', reject);
    req.end();
  });
  assert.is(status, 404);
});

test.run();
