// The host memory floor with real runc and real memory: three dozing servers each holding
// 150 MiB (A least recently used, C most), a floor 1.5 GiB below the host's MemAvailable at start,
// and a real memory hog (a host process) growing in 64 MiB steps until MemAvailable falls below
// the floor. Dozing servers are then stopped least recently used first — only as many as the
// missing memory needs — and the most recently used keeps dozing.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { hostMemAvailable } from '../../src/presence/floor.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { sh } from '../runtime/helpers/env.js';
import { get } from '../proxy/helpers.js';

const IDLE = 1000;
const MiB = 1024 * 1024;
let d: TestDaemon;
let hog: ChildProcess | undefined;

const HOLDER_SH = `#!/bin/bash
exec python3 -c '
import http.server
held = bytearray(b"\\x01") * (150 << 20)
http.server.HTTPServer(("0.0.0.0", 80), http.server.SimpleHTTPRequestHandler).serve_forever()
'
`;

/** A host process that allocates (and writes) 64 MiB more for each line it reads, answering "ok". */
const HOG_PY = `
import sys
held = []
for line in sys.stdin:
    held.append(bytearray(b"\\x01") * (64 << 20))
    print("ok", flush=True)
`;
import { sleep, until } from '../helpers/wait.js';

interface Made {
  id: string;
  slug: string;
}
const presence = () => d.daemon.presence;
const page = (m: Made) => get(d.http, `${m.slug}.localhost`, '/');
const stopped = (m: Made) => d.daemon.runtime.get(m.id)?.state === 'sleeping';
const floorStops = () => d.logs.filter((l) => l.msg === 'server sleeps' && l.why === 'memory floor').map((l) => l.server as string);

async function create(): Promise<Made> {
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(r.status, 200, r.text);
  const b = JSON.parse(r.text);
  const m = { id: b.id, slug: String(b.subdomain).split('.')[0] };
  const w = await sh(d.daemon.runtime, m.id, `cat > /root/run.sh && chmod +x /root/run.sh`, HOLDER_SH);
  assert.is(w.code, 0, w.err);
  await until('the app answers', async () => (await page(m)).status === 200, 30_000);
  return m;
}

const floor = hostMemAvailable() - 1536 * MiB;

test.before(async () => {
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    hosting: { anonServersPerIp: 5 },
    proxy: { idleTimeout: IDLE, idleCheckInterval: 200, dozeTimeout: '1h', dozeMemoryFloor: floor, wakeTimeout: '20s' },
  });
});

test.after(async () => {
  hog?.kill('SIGKILL');
  await d?.stop();
});

test('below the memory floor, dozing servers are stopped least recently used first, only as many as needed', async () => {
  const [a, b, c] = [await create(), await create(), await create()];
  for (const m of [a, b, c]) {
    assert.is((await page(m)).status, 200); // A touched first: least recently used
    await sleep(100);
  }
  await until('all three doze', () => [a, b, c].every((m) => presence().isDozing(m.id)), IDLE + 10_000);
  assert.ok(hostMemAvailable() > floor, `above the floor before the hog (${((hostMemAvailable() - floor) / MiB).toFixed(0)} MiB over)`);
  assert.equal(floorStops(), []);

  hog = spawn('python3', ['-c', HOG_PY], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: hog.stdout! })[Symbol.asyncIterator]();
  let grown = 0;
  let crossedAt = 0;
  while (floorStops().length === 0) {
    if (crossedAt === 0 && hostMemAvailable() < floor) crossedAt = Date.now();
    if (crossedAt === 0) {
      hog.stdin!.write('grow\n');
      await lines.next();
      grown += 64;
      if (grown > 4096) throw new Error('the hog took 4 GiB and no dozing server was stopped');
    } else if (Date.now() - crossedAt > 5000) throw new Error('below the floor for 5 s and nothing stopped');
    else await sleep(10);
  }
  await until('the first stop done', () => stopped(a), 10_000);
  console.log(`   (hog ${grown} MiB; floor crossed → LRU server stopped: ${crossedAt ? Date.now() - crossedAt : '?'} ms)`);
  await sleep(1500); // more floor checks, the hog still holding its memory
  const gone = [a, b, c].map(stopped);
  assert.ok(gone[0], 'the least recently used server was stopped');
  assert.not.ok(gone[2], 'the most recently used one keeps dozing');
  assert.ok(presence().isDozing(c.id));
  assert.ok(!gone[1] || gone[0], 'in LRU order');
  assert.equal(floorStops()[0], a.id, 'A first');
  hog.kill('SIGKILL');
  hog = undefined;
  // what was stopped wakes anew; what dozes thaws
  assert.is((await page(a)).status, 200);
  assert.is((await page(c)).status, 200);
});

test.run();
