// The exec hook path of DNS-01 against real components: the daemon calls an operator's program
// as `<command> present|cleanup <name> <value>` (here a shell script driving `nsupdate` against a
// real named, the way a DNS provider's CLI would be wired in), waits for the record on the zone's
// authoritative servers (found through https.acme.dns.resolver) and gets the wildcard from Pebble;
// a hook that fails leaves the reason in the status without its output.

import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startNamed, type NamedServer } from '../helpers/named.js';
import { startPebble, type PebbleServer } from '../helpers/pebble.js';
import { run } from '../helpers/run.js';

process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no server runs here: plain processes suffice

const domain = 'rbxhook.test';
let dns: NamedServer;
let ca: PebbleServer;
let d: TestDaemon;
const dir = mkdtempSync(join(tmpdir(), 'rbx-acme-hook-'));
const calls = join(dir, 'calls.log');
const failFlag = join(dir, 'fail');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const status = () => d.daemon.acme.status() as Record<string, any>;

test.before(async () => {
  dns = await startNamed({ zones: [domain] });
  ca = await startPebble({ dnsServer: dns.server });
  const hook = join(dir, 'dns-hook');
  writeFileSync(
    hook,
    `#!/bin/sh
# [--quiet] present|cleanup <name> <value>
[ "$1" = --quiet ] || exit 4
shift
echo "$1 $2 $3" >> ${calls}
[ -e ${failFlag} ] && { echo "provider said no: secret-internal-detail" >&2; exit 3; }
case "$1" in present) op=add; ttl=60;; cleanup) op=delete; ttl=;; *) exit 2;; esac
printf 'server ${dns.addr} 53\\nkey hmac-sha256:${dns.keyName} ${dns.keySecret}\\nupdate %s %s. %s TXT "%s"\\nsend\\n' "$op" "$2" "$ttl" "$3" | nsupdate
`,
  );
  chmodSync(hook, 0o755);
  d = await startTestDaemon({
    domain,
    https: {
      host: '127.0.0.1',
      port: 0,
      acme: {
        directory: ca.directory,
        caFile: ca.caFile,
        retryAfter: '1h',
        dns: { provider: 'exec', resolver: dns.server, propagationTimeout: '20s', exec: { command: `${hook} --quiet` } },
      },
    },
  });
});

test.after(async () => {
  await d?.stop();
  await ca?.stop();
  await dns?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test('the exec hook publishes and withdraws both TXT values and the wildcard is issued and verified', async () => {
  const t0 = Date.now();
  while (status().state !== 'active') {
    if (Date.now() - t0 > 60_000) throw new Error(`no certificate: ${JSON.stringify(status())}`);
    await sleep(100);
  }
  console.log(`  issuance (dns-01 through the exec hook): ${status().last_issue_ms} ms`);
  const lines = readFileSync(calls, 'utf8').trim().split('\n');
  const present = lines.filter((l) => l.startsWith(`present _acme-challenge.${domain} `));
  const cleanup = lines.filter((l) => l.startsWith(`cleanup _acme-challenge.${domain} `));
  assert.is(present.length, 2, lines.join('\n')); // apex and wildcard: two values on one name
  assert.is(cleanup.length, 2);
  assert.equal(present.map((l) => l.split(' ')[2]).sort(), cleanup.map((l) => l.split(' ')[2]).sort());
  assert.equal(await dns.dig(`_acme-challenge.${domain}`, 'TXT'), []);
  const root = await ca.issuingRootFile();
  for (const host of [`api.${domain}`, `someslug.${domain}`]) {
    const r = await run('curl', [
      '-sS',
      '--max-time',
      '10',
      '--cacert',
      root,
      '--resolve',
      `${host}:${d.https}:127.0.0.1`,
      '-o',
      '/dev/null',
      `https://${host}:${d.https}/`,
    ]);
    assert.is(r.code, 0, `curl ${host}: ${r.stderr}`);
  }
});

test("a failing hook keeps the certificate and reports the failure without the hook's output", async () => {
  const before = d.daemon.store.certificates.load('host')!;
  writeFileSync(failFlag, '');
  await d.daemon.acme.host!.renewNow();
  const s = status();
  assert.is(s.state, 'failed', JSON.stringify(s));
  assert.match(s.last_error, /the DNS hook \(https\.acme\.dns\.exec\.command\) failed for "present _acme-challenge\.rbxhook\.test"/, s.last_error);
  assert.not.match(JSON.stringify(s), /secret-internal-detail/);
  assert.is(d.daemon.store.certificates.load('host')!.certPem, before.certPem);
  assert.ok(Date.parse(s.next_attempt) - Date.now() > 30 * 60_000, 'the retry waits retryAfter');
});

test.run();
