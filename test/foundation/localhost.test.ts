// *.localhost for every local client: scripts/setup adds the myhostname NSS module to the hosts
// line of nsswitch.conf (scripts/localhost-resolver), so Node's dns.lookup and Python's
// getaddrinfo — not only curl — reach a daemon running with the embedded defaults by name.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { lookup } from 'node:dns/promises';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';

const script = new URL('../../scripts/localhost-resolver', import.meta.url).pathname;
const tmp = mkdtempSync(join(tmpdir(), 'rbx-nss-'));
let d: TestDaemon | undefined;

test.after(async () => {
  await d?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

test('the resolver step puts myhostname after files on the hosts line, once, whatever the line looked like', () => {
  const cases: [string, string][] = [
    ['hosts:          files dns', 'hosts:          files myhostname dns'],
    ['hosts: files mdns4_minimal [NOTFOUND=return] dns', 'hosts: files myhostname mdns4_minimal [NOTFOUND=return] dns'],
    ['hosts: dns', 'hosts: myhostname dns'],
    ['hosts: files myhostname dns', 'hosts: files myhostname dns'],
    ['hosts: files', 'hosts: files myhostname'],
    ['', 'hosts:          files myhostname dns'],
  ];
  for (const [i, [before, after]] of cases.entries()) {
    const file = join(tmp, `nsswitch-${i}.conf`);
    writeFileSync(file, `passwd:         files\n${before}${before ? '\n' : ''}networks:       files\n`);
    for (let n = 0; n < 2; n++) {
      const r = spawnSync(script, [file], { encoding: 'utf8' });
      assert.is(r.status, 0, r.stderr);
    }
    const lines = readFileSync(file, 'utf8').split('\n');
    assert.equal(
      lines.filter((l) => l.startsWith('hosts:')),
      [after],
      `from "${before}"`,
    );
    assert.ok(lines.includes('passwd:         files') && lines.includes('networks:       files'), 'other lines untouched');
  }
});

test("on this host (after scripts/setup) node's dns.lookup resolves foo.localhost to loopback", async () => {
  const all = await lookup('foo.localhost', { all: true });
  assert.ok(all.length > 0);
  for (const a of all) assert.ok(a.address === '127.0.0.1' || a.address === '::1', a.address);
});

test('Python and Node clients reach a daemon on the embedded-default domain by name', async () => {
  d = await startTestDaemon();
  const url = `http://api.localhost:${d.http}/healthz`;
  // run, not spawnSync: the daemon answering lives in this process
  const py = await run('python3', ['-c', `import urllib.request; r = urllib.request.urlopen("${url}", timeout=5); print(r.status)`], { timeoutMs: 20_000 });
  assert.is(py.stdout.trim(), '200', py.stderr);
  const node = await run(
    process.execPath,
    ['-e', `fetch("${url}").then((r) => console.log(r.status), (e) => { console.error(e.cause ?? e); process.exit(1); })`],
    { timeoutMs: 20_000 },
  );
  assert.is(node.stdout.trim(), '200', node.stderr);
});

test.run();
