// The first ten minutes on a fresh anonymous server (256 MB disk, 256 MB RAM), through a real
// daemon: publish with `python3 -m http.server 80` as run.sh, then the everyday tools a person or
// an agent reaches for — git, a venv with pip, node/npm, apt-get install without apt-get update,
// ping — all on the small disk with room left, from the base image's shared lower layer.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { get } from '../proxy/helpers.js';
import { sh } from '../runtime/helpers/env.js';

let d: TestDaemon;
let id = '';
let slug = '';
const MiB = 1024 * 1024;
const timings: string[] = [];

async function run(script: string, input?: string): Promise<string> {
  const t0 = Date.now();
  const r = await sh(d.daemon.runtime, id, script, input);
  timings.push(`${script.split('\n')[0].slice(0, 60)}: ${Date.now() - t0} ms`);
  assert.is(r.code, 0, `${script}\n${r.out}\n${r.err}`);
  return r.out;
}
/** Bytes used on the server's disk (what `df /` inside shows as used). */
async function used(): Promise<number> {
  const out = await run('df -B1 --output=used,size / | tail -1');
  return Number(out.trim().split(/\s+/)[0]);
}

test.before(async () => {
  d = await startTestDaemon({ publicIp: '127.0.0.1', hosting: { rateLimit: { createsPerIpPerHour: 1000 } } });
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(r.status, 200, r.text);
  const b = JSON.parse(r.text);
  id = b.id;
  slug = String(b.subdomain).split('.')[0];
  const rec = d.daemon.runtime.get(id)!;
  assert.is(rec.diskBytes, 256 * MiB, 'an anonymous server has the 256 MB disk');
});

test.after(async () => {
  if (timings.length) console.log(`   timings:\n     ${timings.join('\n     ')}`);
  await d?.stop();
});

test('a fresh server has an empty /root/www and a /root/README.md telling how to publish and what sleeps', async () => {
  assert.is(await run('ls -A /root/www'), '');
  const readme = await run('cat /root/README.md');
  for (const words of [/\/root\/www/, /\/root\/run\.sh/, /0\.0\.0\.0:80/, /sleep/i, /over SSH/, /stop/]) assert.match(readme, words);
});

test('run.sh = `python3 -m http.server 80` is served through the edge within 2 s', async () => {
  await run('echo "<h1>first page</h1>" > /root/www/index.html');
  const t0 = Date.now();
  await run("printf '#!/bin/sh\\nexec python3 -m http.server 80 --directory /root/www\\n' > /root/run.sh && chmod +x /root/run.sh");
  let r = await get(d.http, `${slug}.localhost`, '/');
  while (!(r.status === 200 && r.text.includes('first page') && r.headers['server']?.includes('SimpleHTTP')) && Date.now() - t0 < 10_000) {
    await new Promise((res) => setTimeout(res, 50));
    r = await get(d.http, `${slug}.localhost`, '/');
  }
  const took = Date.now() - t0;
  timings.push(`run.sh http.server served after: ${took} ms`);
  assert.is(r.status, 200, r.text);
  assert.match(String(r.headers['server']), /SimpleHTTP/, 'answered by the app, not the static files');
  assert.ok(took <= 2000, `took ${took} ms`);
});

test('git init and commit work', async () => {
  const out = await run(
    'cd /root && git init -q proj && cd proj && echo hi > a && git add a && git -c user.name=me -c user.email=me@example.com commit -qm first && git log --oneline',
  );
  assert.match(out, /^[0-9a-f]{7,} first\n$/);
});

test('python3 -m venv and pip install of a wheel built here work, and the package imports', async () => {
  // a wheel made on the spot (zip + dist-info), so nothing is fetched from PyPI
  const mkwheel = String.raw`
import base64, hashlib, zipfile
files = {"rbxhello/__init__.py": "def hi():\n    return 'hello from a wheel'\n",
         "rbxhello-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: rbxhello\nVersion: 1.0\n",
         "rbxhello-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
rec = []
with zipfile.ZipFile("/root/rbxhello-1.0-py3-none-any.whl", "w") as z:
    for n, t in files.items():
        z.writestr(n, t)
        h = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
        rec.append("%s,sha256=%s,%d" % (n, h, len(t.encode())))
    rec.append("rbxhello-1.0.dist-info/RECORD,,")
    z.writestr("rbxhello-1.0.dist-info/RECORD", "\n".join(rec) + "\n")
`;
  await run('python3 - ', mkwheel);
  await run('cd /root && python3 -m venv v && v/bin/pip install -q --no-index /root/rbxhello-1.0-py3-none-any.whl');
  assert.is(await run('/root/v/bin/python -c "import rbxhello; print(rbxhello.hi())"'), 'hello from a wheel\n');
  assert.match(await run('pip3 --version'), /^pip \d+/);
});

test('node -e and npm run', async () => {
  assert.is(await run('node -e "console.log(6 * 7)"'), '42\n');
  assert.match(await run('npm --version'), /^\d+\.\d+\.\d+\n$/);
});

test('the everyday tools are there and ping works without privileges', async () => {
  const tools = 'git curl wget ssh scp nano vi less zip unzip xz jq sqlite3 nc ps top ip dig gcc make node npm python3 pip3';
  assert.is(await run(`for t in ${tools}; do command -v $t >/dev/null || echo missing $t; done`), '');
  assert.match(await run('ping -c1 -W2 127.0.0.1'), /1 received/);
  assert.match(await run('sqlite3 :memory: "select 6*7"'), /^42\n$/);
});

test('apt sources name bookworm, its updates and its security archive; package lists ship in the image', async () => {
  const sources = await run('cat /etc/apt/sources.list.d/*.sources');
  assert.match(sources, /Suites: bookworm bookworm-updates\n/);
  assert.match(sources, /Suites: bookworm-security\n/);
  assert.match(sources, /debian-security/);
  assert.match(await run('apt-cache policy hello'), /Candidate: \d/);
});

test('apt-get install of a small package works without apt-get update, keeps no .deb and leaves the disk mostly free', async () => {
  const before = await used();
  // reachable only when the host can reach the Debian mirror (egress is NATed through the host)
  await run('DEBIAN_FRONTEND=noninteractive apt-get install -y -q hello');
  assert.is(await run('hello'), 'Hello, world!\n');
  assert.is(await run('ls /var/cache/apt/archives | grep -c "\\.deb$" || true'), '0\n');
  assert.is(await run('ls /var/cache/apt | grep -c "\\.bin$" || true'), '0\n');
  const after = await used();
  timings.push(`disk used after apt-get install hello: ${(after / MiB).toFixed(1)} MiB (before ${(before / MiB).toFixed(1)} MiB)`);
  assert.ok(after - before < 10 * MiB, `apt-get install hello took ${after - before} bytes of the disk`);
});

test('after all of it the 256 MB disk has most of its room left', async () => {
  const u = await used();
  timings.push(`disk used at the end: ${(u / MiB).toFixed(1)} MiB of 256`);
  assert.ok(u < 64 * MiB, `${u} bytes used`);
});

test.run();
