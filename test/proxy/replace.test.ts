// Replacing a running app drops no request: a real daemon and runc container whose /root/run.sh
// serves with python's http.server is rewritten (as a deploy over SSH or exec does) to run a node
// server instead. The supervisor stops the old app and starts the new one, and port 80 is refused
// in between; requests arriving then wait for the new app (proxy.appStartGrace) instead of
// getting a 502. A steady stream — one client sending requests back to back and three at once,
// over HTTP/1.1 (the edge's lane) and HTTP/2 over TLS (the full path) — counts its failures.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { connect as h2connect, type ClientHttp2Session } from 'node:http2';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { until } from '../helpers/wait.js';
import { sh } from '../runtime/helpers/env.js';
import { get } from './helpers.js';

let d: TestDaemon;
let id = '';
let slug = '';

const APP_PY = readFileSync(new URL('../fixtures/echoapp.py', import.meta.url), 'utf8');
const PY_RUN = `#!/bin/bash\nexec python3 /root/app.py 'python pid={pid}'\n`;
const APP_JS = `require('node:http').createServer((q, s) => s.end('node pid=' + process.pid)).listen(80, '0.0.0.0');\n`;
const NODE_RUN = `#!/bin/bash\nexec node /root/app.js\n`;

test.before(async () => {
  d = await startTestDaemon({ publicIp: '127.0.0.1', proxy: { appStartGrace: '5s' } });
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(r.status, 200, r.text);
  const b = JSON.parse(r.text);
  id = b.id;
  slug = String(b.subdomain).split('.')[0];
  const w = await sh(
    d.daemon.runtime,
    id,
    `cat > /root/app.py && cat > /root/app.js <<'EOF'\n${APP_JS}EOF\ncat > /root/run.sh <<'EOF'\n${PY_RUN}EOF\nchmod +x /root/run.sh`,
    APP_PY,
  );
  assert.is(w.code, 0, w.err);
});

test.after(async () => {
  await d?.stop();
});

interface Tally {
  ok: number;
  failures: string[];
  python: number;
  node: number;
}

function count(t: Tally, status: number, text: string): void {
  if (status !== 200) return void t.failures.push(`${status} ${text.slice(0, 120)}`);
  t.ok++;
  if (text.startsWith('python')) t.python++;
  else if (text.startsWith('node')) t.node++;
  else t.failures.push(`200 with an unknown body: ${text.slice(0, 80)}`);
}

function h2get(s: ClientHttp2Session, path: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const q = s.request({ ':path': path });
    let status = 0;
    let text = '';
    q.on('response', (h) => (status = Number(h[':status'])));
    q.on('data', (c) => (text += c));
    q.on('end', () => resolve({ status, text }));
    q.on('error', reject);
    q.setTimeout(10_000, () => q.close());
    q.end();
  });
}

test('requests that arrive while run.sh is replaced (python → node) wait for the new app: none fails', async () => {
  const host = `${slug}.localhost`;
  await until('the python app', async () => (await get(d.http, host, '/')).text.startsWith('python'), 30_000, 50);

  const t: Tally = { ok: 0, failures: [], python: 0, node: 0 };
  let stop = false;
  let nodeSince = 0;
  const plain = async (n: number) => {
    for (let i = 0; !stop; i++) {
      try {
        const r = await get(d.http, host, `/p${n}-${i}`);
        count(t, r.status, r.text);
      } catch (e) {
        t.failures.push(`plain: ${(e as Error).message}`);
      }
    }
  };
  const h2 = async () => {
    const s = h2connect(`https://${host}:${d.https}`, {
      ca: readFileSync(d.daemon.tls.caFile!),
      lookup: (_h, o, cb) => (cb as any)(null, o.all ? [{ address: '127.0.0.1', family: 4 }] : '127.0.0.1', 4),
    });
    s.on('error', (e) => t.failures.push(`h2 session: ${e.message}`));
    try {
      for (let i = 0; !stop; i++) {
        try {
          const r = await h2get(s, `/h${i}`);
          count(t, r.status, r.text);
        } catch (e) {
          t.failures.push(`h2: ${(e as Error).message}`);
        }
      }
    } finally {
      s.close();
    }
  };
  // one client back to back, three at once, one HTTP/2 stream after another
  const clients = [plain(0), plain(1), plain(2), plain(3), h2()];
  try {
    await until('requests answered by python', () => t.python >= 20, 10_000);
    const w = await sh(d.daemon.runtime, id, `cat > /root/run.sh.new <<'EOF'\n${NODE_RUN}EOF\nchmod +x /root/run.sh.new && mv /root/run.sh.new /root/run.sh`);
    assert.is(w.code, 0, w.err);
    // the stream goes on until the node app has answered for a while
    await until(
      'the node app answering for 1 s',
      () => {
        if (t.node > 0 && nodeSince === 0) nodeSince = Date.now();
        return nodeSince > 0 && Date.now() - nodeSince > 1000;
      },
      30_000,
    );
  } finally {
    stop = true;
    await Promise.all(clients);
  }
  assert.ok(t.python >= 20 && t.node > 0, JSON.stringify({ ...t, failures: t.failures.length }));
  assert.equal(t.failures, [], `${t.failures.length} of ${t.ok + t.failures.length} requests failed`);
});

test.run();
