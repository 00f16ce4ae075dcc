// The hosting API end to end: a real daemon (LMDB, TLS, SSH, proxy, runc runtime) driven with
// curl, OpenSSH and a local server that speaks Twilio's Messages API.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { startTwilio, type FakeTwilio } from '../helpers/twilio.js';

/** The daemon's clock for its SMS time windows: moved by the tests instead of waiting. */
let smsSkew = 0;
const smsNow = () => Date.now() + smsSkew;

let d: TestDaemon;
let twilio: FakeTwilio;
const tmp = mkdtempSync(join(tmpdir(), 'rbx-host-'));

test.before(async () => {
  twilio = await startTwilio();
  d = await startTestDaemon(
    {
      publicIp: '127.0.0.1',
      hosting: {
        anonServersPerIp: 3,
        rateLimit: { createsPerIpPerHour: 1000 },
        portPool: '24100-24110',
        sms: { provider: 'twilio', twilioBaseUrl: twilio.url, twilioAccountSid: twilio.sid, twilioAuthToken: twilio.token, twilioFrom: '+15005550006' },
      },
    },
    {},
    smsNow,
  );
});
test.after(async () => {
  await d?.stop();
  await twilio?.close();
  rmSync(tmp, { recursive: true, force: true });
});

interface Res {
  status: number;
  body: any;
  headers: string;
}
async function api(method: string, path: string, opts: { key?: string; body?: unknown; raw?: string; ip?: string } = {}): Promise<Res> {
  const args = ['-sS', '-D', '-', '-X', method, '--cacert', join(d.dataDir, 'tls', 'ca.pem'), '--resolve', `api.localhost:${d.https}:127.0.0.1`];
  if (opts.key) args.push('-H', `authorization: Bearer ${opts.key}`);
  if (opts.body !== undefined || opts.raw !== undefined)
    args.push('-H', 'content-type: application/json', '--data-binary', opts.raw ?? JSON.stringify(opts.body));
  if (opts.ip) args.push('--interface', opts.ip);
  const r = await run('curl', [...args, `https://api.localhost:${d.https}${path}`], { timeoutMs: 60_000 });
  const split = r.stdout.indexOf('\r\n\r\n');
  const headers = r.stdout.slice(0, split);
  const text = r.stdout.slice(split + 4);
  let body: any = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: Number(/^HTTP\/[\d.]+ (\d+)/.exec(headers)?.[1] ?? 0), body, headers };
}

function keyFile(res: Res): string {
  const file = join(tmp, res.body.id);
  writeFileSync(file, res.body.ssh_private_key);
  chmodSync(file, 0o600);
  return file;
}
async function ssh(res: Res, command: string) {
  const m = /^ssh -i ~\/\.ssh\/(srv_\w+) root@([\d.]+) -p (\d+)$/.exec(res.body.ssh);
  assert.ok(m, `ssh line has the documented form: ${res.body.ssh}`);
  return run(
    'ssh',
    [
      '-i',
      keyFile(res),
      '-o',
      'StrictHostKeyChecking=no',
      '-o',
      'UserKnownHostsFile=/dev/null',
      '-o',
      'IdentitiesOnly=yes',
      '-o',
      'BatchMode=yes',
      '-o',
      'LogLevel=ERROR',
      '-p',
      m![3],
      `root@${m![2]}`,
      command,
    ],
    { timeoutMs: 60_000 },
  );
}
const page = (slug: string, path = '/') =>
  run('curl', ['-sS', '--cacert', join(d.dataDir, 'tls', 'ca.pem'), '--resolve', `${slug}:${d.https}:127.0.0.1`, `https://${slug}:${d.https}${path}`]);

let anon: Res;

test('an empty POST /create makes an anonymous account and a server whose ssh line works and whose www is served', async () => {
  anon = await api('POST', '/create');
  assert.is(anon.status, 200, JSON.stringify(anon.body));
  const b = anon.body;
  assert.match(b.id, /^srv_[0-9a-f]+$/);
  assert.match(b.api_key, /^rbx_[0-9A-Za-z]{32}$/);
  assert.match(b.ssh_private_key, /^-----BEGIN OPENSSH PRIVATE KEY-----/);
  assert.match(b.subdomain, /\.localhost$/);
  assert.ok(b.subdomain_note, 'random slug is explained');
  assert.ok(b.account_note);
  assert.is(b.state, 'running');
  assert.equal(b.credits.tier, 'anonymous');
  for (const k of ['never_sleep', 'suspended', 'flag', 'exposed_ports', 'usage']) assert.ok(k in b, k);
  const keygen = await run('ssh-keygen', ['-y', '-f', keyFile(anon)]);
  assert.is(keygen.code, 0, keygen.stderr);
  const r = await ssh(anon, 'whoami && mkdir -p /root/www && echo "hello from $(hostname)" > /root/www/index.html');
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout.trim(), 'root');
  const slug = b.subdomain.split('.')[0];
  const got = await page(b.subdomain);
  assert.is(got.stdout.trim(), `hello from ${slug}`);
});

test('every endpoint but /create and /feedback answers 401 for missing, malformed and revoked keys', async () => {
  for (const [m, p] of [
    ['GET', '/servers'],
    ['GET', `/servers/${anon.body.id}`],
    ['GET', '/credits'],
    ['DELETE', `/servers/${anon.body.id}`],
    ['POST', '/expose'],
  ]) {
    const r = await api(m, p);
    assert.is(r.status, 401, `${m} ${p}`);
    assert.is(r.body.error, 'missing_api_key');
  }
  assert.is((await api('GET', '/servers', { key: 'rbx_short' })).body.error, 'invalid_api_key');
  assert.is((await api('GET', '/servers', { key: 'rbx_' + 'A'.repeat(32) })).body.error, 'invalid_api_key');
  const fresh = await api('POST', '/create');
  const rotated = await api('POST', '/account/rotate-key', { key: fresh.body.api_key });
  assert.is(rotated.status, 200);
  const old = await api('GET', '/servers', { key: fresh.body.api_key });
  assert.is(old.status, 401);
  assert.is(old.body.error, 'revoked_api_key');
  assert.is((await api('GET', '/servers', { key: rotated.body.api_key })).body.servers.length, 1);
  assert.is((await api('DELETE', `/servers/${fresh.body.id}`, { key: rotated.body.api_key })).status, 200);
});

test('read endpoints return the Server and Credits objects; another account gets 404', async () => {
  const list = await api('GET', '/servers', { key: anon.body.api_key });
  assert.is(list.status, 200);
  assert.is(list.body.servers[0].id, anon.body.id);
  const one = await api('GET', `/servers/${anon.body.id}`, { key: anon.body.api_key });
  assert.equal(Object.keys(one.body).sort(), ['credits', 'exposed_ports', 'flag', 'id', 'never_sleep', 'state', 'subdomain', 'suspended', 'usage']);
  assert.ok(one.body.usage.disk_mb_used > 0);
  const credits = await api('GET', '/credits', { key: anon.body.api_key });
  assert.equal(Object.keys(credits.body).sort(), ['balance_usd', 'checkpoint_bytes', 'egress_gb_left', 'ram_gb_hours_left', 'tier']);
  assert.is(credits.body.checkpoint_bytes, 0, 'no checkpoint stored yet');
  const other = await api('POST', '/create', { body: { subdomains: ['other-acct'] } });
  assert.is(other.status, 200);
  const cross = await api('GET', `/servers/${anon.body.id}`, { key: other.body.api_key });
  assert.is(cross.status, 404);
  assert.is(cross.body.error, 'server_not_found');
  assert.is((await api('DELETE', `/servers/${anon.body.id}`, { key: other.body.api_key })).status, 404);
  assert.is((await api('DELETE', `/servers/${other.body.id}`, { key: other.body.api_key })).status, 200);
});

test('slugs: preference order, lowercasing, reserved and invalid skipped with a note, 409 when every usable one is taken', async () => {
  const a = await api('POST', '/create', { key: anon.body.api_key, body: { subdomains: ['API', 'bad_slug', 'x', 'My-Site', 'second'] } });
  assert.is(a.status, 200, JSON.stringify(a.body));
  assert.is(a.body.subdomain, 'my-site.localhost');
  assert.match(a.body.subdomain_note, /"api" is reserved/);
  assert.match(a.body.subdomain_note, /"bad_slug"/);
  const taken = await api('POST', '/create', { key: anon.body.api_key, body: { subdomains: ['my-site'] } });
  assert.is(taken.status, 409);
  assert.is(taken.body.error, 'subdomain_taken');
  const unusable = await api('POST', '/create', { key: anon.body.api_key, body: { subdomains: ['www', '-no-'] } });
  assert.is(unusable.status, 200);
  assert.match(unusable.body.subdomain_note, /none of the wanted subdomains is usable/);
  for (const s of [a, unusable]) assert.is((await api('DELETE', `/servers/${s.body.id}`, { key: anon.body.api_key })).status, 200);
  const again = await api('POST', '/create', { key: anon.body.api_key, body: { subdomains: ['my-site'] } });
  assert.is(again.body.subdomain, 'my-site.localhost', 'a deleted server frees its slug');
  await api('DELETE', `/servers/${again.body.id}`, { key: anon.body.api_key });
});

test('never_sleep without a verified phone is 403', async () => {
  const r = await api('POST', '/create', { key: anon.body.api_key, body: { never_sleep: true } });
  assert.is(r.status, 403);
  assert.is(r.body.error, 'phone_required');
});

test('hostile and wrongly typed fields get 400/413/415 with {error, detail}', async () => {
  const cases: [unknown, number][] = [
    [{ subdomains: 'abc' }, 400],
    [{ subdomains: [1, 2] }, 400],
    [{ subdomains: Array(50).fill('abc') }, 400],
    [{ subdomains: ['a'.repeat(100000)] }, 413],
    [{ never_sleep: 'yes' }, 400],
    [{ phone: 14155550100 }, 400],
    [{ phone: '+1 (415) 555' }, 400],
    [{ phone: '+14155550100', code: 'abcdef' }, 400],
    [{ code: '123456' }, 400],
    [{ unexpected: true }, 400],
    [[], 400],
    ['text', 400],
    [null, 400],
    [JSON.parse('{"__proto__": {"admin": true}}'), 400],
  ];
  for (const [body, status] of cases) {
    const r = await api('POST', '/create', { key: anon.body.api_key, raw: JSON.stringify(body) });
    assert.is(r.status, status, `${JSON.stringify(body).slice(0, 60)} → ${JSON.stringify(r.body)}`);
    assert.type(r.body.error, 'string');
    assert.type(r.body.detail, 'string');
  }
  const expose = await api('POST', '/expose', { key: anon.body.api_key, body: { server: '../../etc', port: 99999 } });
  assert.is(expose.status, 400);
  assert.is((await api('POST', '/create', { key: anon.body.api_key, raw: '{"subdomains": [' })).body.error, 'invalid_json');
});

test('phone sign-up texts a code, the code makes a verified account, and a second login returns the same key', async () => {
  const phone = '+14155550177';
  const step1 = await api('POST', '/create', { body: { phone } });
  assert.is(step1.status, 200);
  assert.is(step1.body.verification_required, true);
  assert.not.ok(step1.body.id, 'no server in step 1');
  const code = twilio.codeFor(phone)!;
  assert.match(code, /^\d{6}$/);
  const wrong = await api('POST', '/create', { body: { phone, code: code === '000000' ? '999999' : '000000' } });
  assert.is(wrong.status, 400);
  assert.is(wrong.body.error, 'code_invalid');
  const step2 = await api('POST', '/create', { body: { phone, code } });
  assert.is(step2.status, 200, JSON.stringify(step2.body));
  assert.match(step2.body.account_note, /new verified account/);
  assert.is(step2.body.credits.tier, 'verified');
  smsSkew += 31_000; // past the 30 s gap between codes to one number: the daemon's clock moves, nobody waits
  await api('POST', '/create', { body: { phone } });
  const login = await api('POST', '/create', { body: { phone, code: twilio.codeFor(phone) } });
  assert.is(login.status, 200, JSON.stringify(login.body));
  assert.is(login.body.api_key, step2.body.api_key);
  assert.match(login.body.account_note, /logged into the existing account/);
  const ns = await api('POST', '/create', { key: step2.body.api_key, body: { never_sleep: true } });
  assert.is(ns.status, 200);
  assert.is(ns.body.never_sleep, true);
  for (const s of [step2, login, ns]) await api('DELETE', `/servers/${s.body.id}`, { key: step2.body.api_key });
});

test('the per-IP cap of anonymous servers answers 403', async () => {
  const made: Res[] = [];
  let r: Res;
  do {
    r = await api('POST', '/create');
    if (r.status === 200) made.push(r);
  } while (r.status === 200 && made.length < 5);
  assert.is(r.status, 403);
  assert.is(r.body.error, 'ip_limit');
  for (const s of made) await api('DELETE', `/servers/${s.body.id}`, { key: s.body.api_key });
});

test('/expose publishes a TCP echo server of the container; unexpose and delete release it', async () => {
  const start = await ssh(
    anon,
    `nohup python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 7000)); s.listen()
while True:
    c, _ = s.accept(); c.sendall(c.recv(100)); c.close()
' >/dev/null 2>&1 & sleep 0.5`,
  );
  assert.is(start.code, 0, start.stderr);
  const ex = await api('POST', '/expose', { key: anon.body.api_key, body: { server: anon.body.id, port: 7000 } });
  assert.is(ex.status, 200, JSON.stringify(ex.body));
  assert.is(ex.body.container_port, 7000);
  const port = Number(ex.body.public.split(':')[1]);
  const echo = await new Promise<string>((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.write('ping-rootbox'));
    let data = '';
    s.on('data', (c) => (data += c));
    s.on('close', () => resolve(data));
    s.on('error', reject);
  });
  assert.is(echo, 'ping-rootbox');
  const view = await api('GET', `/servers/${anon.body.id}`, { key: anon.body.api_key });
  assert.equal(view.body.exposed_ports, [ex.body]);
  assert.is((await api('DELETE', '/expose', { key: anon.body.api_key, body: { server: anon.body.id, port: 7000 } })).status, 200);
  const refused = await new Promise<boolean>((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.on('connect', () => (s.destroy(), resolve(false)));
    s.on('error', () => resolve(true));
  });
  assert.ok(refused, 'the public port is closed after unexpose');
});

test('delete frees the container, mounts, loop device, veth, ports and slug', async () => {
  const id = anon.body.id;
  const before = readFileSync('/proc/mounts', 'utf8');
  assert.ok(before.includes(id), 'the server had mounts');
  await api('POST', '/expose', { key: anon.body.api_key, body: { server: id, port: 7000 } });
  const r = await api('DELETE', `/servers/${id}`, { key: anon.body.api_key });
  assert.is(r.status, 200);
  assert.is((await api('GET', `/servers/${id}`, { key: anon.body.api_key })).status, 404);
  assert.not.ok(readFileSync('/proc/mounts', 'utf8').includes(id), 'no mount left');
  const loops = await run('losetup', ['-a']);
  assert.not.ok(loops.stdout.includes(id), 'no loop device left');
  const runc = await run('runc', ['--root', join(d.dataDir, 'runc'), 'list', '-q']);
  assert.not.ok(runc.stdout.includes(id), 'no runc state left');
  assert.is(d.daemon.store.exposures.byServer(id).length, 0, 'no exposed port left');
  assert.is(d.daemon.store.servers.bySlug(anon.body.subdomain.split('.')[0]), undefined, 'slug free');
});

test('/openapi.json is OpenAPI 3.1 and validates', async () => {
  const { Validator } = await import('@seriousme/openapi-schema-validator');
  const r = await api('GET', '/openapi.json');
  assert.is(r.body.openapi, '3.1.0');
  const v = new Validator();
  const res = await v.validate(r.body);
  assert.ok(res.valid, JSON.stringify(res.errors));
  for (const p of ['/create', '/servers', '/servers/{id}', '/credits', '/expose', '/feedback']) assert.ok(r.body.paths[p], p);
});

test.run();
