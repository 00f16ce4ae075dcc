// ACME for the host's own domain against real components started here: BIND 9 (named) as the
// zone's authoritative server taking RFC 2136 updates signed with TSIG, Pebble as the CA
// (resolving through that named, short-lived certificates), and a real daemon. The certificate
// for {domain} + *.{domain} is issued through DNS-01 and curl verifies api. and a slug against
// Pebble's root; a scheduled renewal swaps it while an HTTP/2 connection stays open; a refused
// DNS update (wrong TSIG secret) keeps the old certificate and says so in the log, the status and
// doctor, and the backoff retry recovers once the key is right; HTTP-01 through the plain
// listener issues a certificate for another name, which SNI then picks; a stranger's SNI gets the
// default certificate and orders nothing.

import { X509Certificate } from 'node:crypto';
import { connect as h2connect, type ClientHttp2Session } from 'node:http2';
import { connect as tlsConnect } from 'node:tls';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { callAdmin } from '../../src/admin/index.js';
import { acmeCheck } from '../../src/ops/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startNamed, type NamedServer } from '../helpers/named.js';
import { freePort, startPebble, type PebbleServer } from '../helpers/pebble.js';
import { run } from '../helpers/run.js';

process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no server runs here: plain processes suffice

const domain = 'rbxacme.test';
const other = 'shop.customer.test';
let dns: NamedServer;
let ca: PebbleServer;
let d: TestDaemon;
let root: string;
let goodSecret: string;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const status = () => d.daemon.acme.status() as ReturnType<TestDaemon['daemon']['acme']['status']> & Record<string, any>;

async function until<T>(what: string, f: () => T | undefined | false, ms = 60_000): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = f();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}; acme status ${JSON.stringify(status())}`);
    await sleep(100);
  }
}

/** The serial of the certificate the daemon presents for an SNI name (a new TLS connection). */
function served(name: string): Promise<{ serial: string; names: string }> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port: d.https, servername: name, rejectUnauthorized: false, ALPNProtocols: ['h2'] }, () => {
      const c = s.getPeerCertificate();
      s.destroy();
      resolve({ serial: c.serialNumber, names: c.subjectaltname ?? '' });
    });
    s.on('error', reject);
  });
}

const curl = (host: string, path = '/healthz') =>
  run('curl', [
    '-sS',
    '--max-time',
    '10',
    '--cacert',
    root,
    '--resolve',
    `${host}:${d.https}:127.0.0.1`,
    '-o',
    '/dev/null',
    '-w',
    '%{http_code}',
    `https://${host}:${d.https}${path}`,
  ]);

test.before(async () => {
  dns = await startNamed({ zones: [domain, 'customer.test'], records: { 'customer.test': ['shop A 127.0.0.1'] } });
  goodSecret = dns.keySecret;
  const httpPort = await freePort();
  // certificates live 120 s and are renewed 100 s before they end: a renewal falls 10-20 s after each issuance
  ca = await startPebble({ dnsServer: dns.server, httpPort, validitySeconds: 120 });
  d = await startTestDaemon({
    domain,
    http: { host: '127.0.0.1', port: httpPort },
    https: {
      host: '127.0.0.1',
      port: 0,
      acme: {
        directory: ca.directory,
        caFile: ca.caFile,
        email: `ops@${domain}`,
        renewBefore: '100s',
        retryAfter: '1s',
        dns: { provider: 'rfc2136', propagationTimeout: '20s', rfc2136: { server: dns.server, keyName: dns.keyName, keySecret: dns.keySecret } },
      },
    },
  });
  root = await ca.issuingRootFile();
});

test.after(async () => {
  await d?.stop();
  await ca?.stop();
  await dns?.stop();
});

test('the certificate for {domain} and *.{domain} is issued through DNS-01 (RFC 2136 + TSIG) and curl verifies api. and a slug', async () => {
  const s = await until('the host certificate', () => status().state === 'active' && status());
  console.log(`  issuance (dns-01, apex + wildcard, Pebble + BIND): ${s.last_issue_ms} ms`);
  for (const host of [`api.${domain}`, `myslug.${domain}`]) {
    const r = await curl(host, host.startsWith('api.') ? '/healthz' : '/');
    assert.is(r.code, 0, `curl ${host}: ${r.stderr}`);
    assert.match(r.stdout, /^[2-4]\d\d$/);
  }
  const cert = await served(`api.${domain}`);
  assert.match(cert.names, new RegExp(`DNS:\\*\\.${domain.replace('.', '\\.')}`));
  assert.equal(d.daemon.store.certificates.load('host')?.names, [domain, `*.${domain}`]);
  // the TXT records were withdrawn after validation
  assert.equal(await dns.dig(`_acme-challenge.${domain}`, 'TXT'), []);
});

test('a renewal swaps the certificate in without dropping an open HTTP/2 connection', async () => {
  const before = await served(`api.${domain}`);
  const issuedAt = status().issued_at;
  const session: ClientHttp2Session = h2connect(`https://127.0.0.1:${d.https}`, { ca: await ca.issuingRoot(), servername: `api.${domain}` });
  let closed = false;
  session.on('close', () => (closed = true));
  session.on('error', () => {});
  const get = () =>
    new Promise<number>((resolve, reject) => {
      const req = session.request({ ':path': '/healthz', ':authority': `api.${domain}:${d.https}` });
      req.on('response', (h) => resolve(Number(h[':status'])));
      req.on('error', reject);
      req.resume();
      req.end();
    });
  try {
    assert.is(await get(), 200);
    await until('the scheduled renewal', () => status().issued_at !== issuedAt && status().state === 'active', 60_000);
    console.log(`  renewal (scheduled, dns-01): ${status().last_issue_ms} ms`);
    const after = await served(`api.${domain}`);
    assert.is.not(after.serial, before.serial, 'new handshakes get the renewed certificate');
    assert.is(await get(), 200, 'the open HTTP/2 connection still answers');
    assert.not.ok(closed, 'the HTTP/2 session was not closed');
    assert.is((await curl(`api.${domain}`)).stdout, '200');
  } finally {
    session.destroy();
  }
});

test('a refused DNS update (wrong TSIG secret) keeps the old certificate and says so in the log, status and doctor; the retry recovers', async () => {
  await until('no attempt under way', () => status().state === 'active');
  await dns.setKeySecret(Buffer.alloc(32, 7).toString('base64'));
  try {
    // a renewal that had already published its record may still succeed: wait for a refused one
    await until('a failed renewal', () => {
      if (status().state !== 'issuing') void d.daemon.acme.host!.renewNow();
      return status().last_error && status();
    });
    const s = status();
    assert.match(s.last_error, /refused by .*NOTAUTH.*TSIG (BADSIG|BADKEY)/);
    assert.is.not(s.not_after, null);
    const stored = d.daemon.store.certificates.load('host')!;
    assert.ok(stored.notAfter > Date.now(), 'the stored certificate is still valid');
    assert.is(s.not_after, new Date(stored.notAfter).toISOString());
    assert.is((await served(`api.${domain}`)).serial, new X509Certificate(stored.certPem).serialNumber, 'the stored certificate is the one served');
    assert.is((await curl(`api.${domain}`)).code, 0, 'the previous certificate still verifies');
    assert.ok(
      d.logs.some((l) => l.msg === 'ACME renewal failed; keeping the previous certificate' && /NOTAUTH/.test(String(l.err))),
      'the log says the renewal failed and the old certificate is kept',
    );
    const admin = await callAdmin(d.dataDir, 'GET', '/status');
    const a = (admin!.body as { acme: Record<string, unknown> }).acme;
    assert.is(a.configured, true);
    assert.match(String(a.last_error), /NOTAUTH/);
    assert.ok(Number(a.failures) >= 1);
    const check = acmeCheck(d.cfg)!;
    assert.is(check.ok, false);
    assert.match(check.detail, /renewal failed .*NOTAUTH.*still serving the previous certificate/);
  } finally {
    await dns.setKeySecret(goodSecret);
  }
  const failedAt = status().last_attempt;
  await until(
    'the backoff retry to succeed',
    () => status().state === 'active' && !status().last_error && status().last_attempt !== failedAt && status(),
    60_000,
  );
  assert.is(acmeCheck(d.cfg)!.ok, true);
});

test("HTTP-01 through the plain listener issues another name's certificate, and SNI picks it", async () => {
  const t0 = Date.now();
  const issued = await d.daemon.acme.issue([other], 'http-01');
  console.log(`  issuance (http-01, one name): ${Date.now() - t0} ms`);
  d.daemon.acme.certificates.save(other, issued);
  assert.match((await served(other)).names, new RegExp(`DNS:${other.replace(/\./g, '\\.')}`));
  const r = await curl(other, '/');
  assert.is(r.code, 0, `curl verifies ${other}: ${r.stderr}`);
  assert.is(d.daemon.acme.http01.size, 0, 'the token was withdrawn');
  assert.ok(d.daemon.acme.certificates.remove(other));
  assert.match((await served(other)).names, new RegExp(`\\*\\.${domain.replace('.', '\\.')}`), 'removed: the default again');
});

test('an unknown SNI name gets the default certificate at once and never starts an order', async () => {
  const t0 = Date.now();
  const got = await served('stranger.example.org');
  assert.ok(Date.now() - t0 < 5000);
  assert.match(got.names, new RegExp(`\\*\\.${domain.replace('.', '\\.')}`));
  assert.equal(
    d.daemon.store.certificates.all().map((c) => c.id),
    ['host'],
  );
  assert.is(d.daemon.acme.certificates.load('stranger.example.org'), undefined);
});

test.run();
