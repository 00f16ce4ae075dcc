// The subdomain edge with real runc containers: a real daemon (runtime, store, hosting API,
// proxy, edge), servers made with POST /create, apps started by the container's own supervisor
// from /root/run.sh. Sleep after idleTimeout, wake on request, one start for a crowd, a long
// WebSocket keeping a server awake, static pages of a sleeping server.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { connect as h2connect } from 'node:http2';
import WebSocket from 'ws';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { sh } from '../runtime/helpers/env.js';
import { get } from './helpers.js';

const IDLE = 3000;
let d: TestDaemon;

/** The shared HTTP/1.1 + WebSocket echo app (test/fixtures/echoapp.py), answering with its pid, path and X-Forwarded-For. */
const APP_PY = readFileSync(new URL('../fixtures/echoapp.py', import.meta.url), 'utf8');
const RUN_SH = `#!/bin/bash\necho "run.sh starting"\nexec python3 /root/app.py 'hello from the container pid={pid} path={path} xff={xff}'\n`;

interface Made {
  id: string;
  slug: string;
  key: string;
}

async function create(key?: string): Promise<Made> {
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST', headers: key ? { authorization: `Bearer ${key}` } : {} });
  assert.is(r.status, 200, r.text);
  const b = JSON.parse(r.text);
  return { id: b.id, slug: String(b.subdomain ?? '').split('.')[0] || (await slugOf(b.id, key ?? b.api_key)), key: key ?? b.api_key };
}

async function slugOf(id: string, key: string): Promise<string> {
  const r = await get(d.http, 'api.localhost', `/servers/${id}`, { headers: { authorization: `Bearer ${key}` } });
  return JSON.parse(r.text).subdomain.split('.')[0];
}

async function apiState(m: Made): Promise<string> {
  const r = await get(d.http, 'api.localhost', `/servers/${m.id}`, { headers: { authorization: `Bearer ${m.key}` } });
  return JSON.parse(r.text).state;
}

const rtState = (id: string) => d.daemon.runtime.get(id)?.state;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, cond: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
const page = (m: Made, path = '/') => get(d.http, `${m.slug}.localhost`, path);
const runShStarts = async (id: string) => ((await sh(d.daemon.runtime, id, 'cat /var/log/run.sh.log')).out.match(/run\.sh starting/g) ?? []).length;

let app: Made;
let runShBefore = 0;
let site: Made;

test.before(async () => {
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    hosting: { anonServersPerIp: 5, rateLimit: { createsPerIpPerHour: 1000 } },
    proxy: { idleTimeout: IDLE, idleCheckInterval: 200, wakeTimeout: '20s' },
  });
  app = await create();
  const w = await sh(d.daemon.runtime, app.id, `cat > /root/app.py && cat > /root/run.sh <<'EOF'\n${RUN_SH}EOF\nchmod +x /root/run.sh`, APP_PY);
  assert.is(w.code, 0, w.err);
});

test.after(async () => {
  await d?.stop();
});

test('a run.sh server in a container is proxied, with X-Forwarded-For, over HTTP/1.1 and HTTP/2', async () => {
  let r = await page(app, '/first');
  const t0 = Date.now();
  while (!r.text.startsWith('hello from the container') && Date.now() - t0 < 10_000) {
    await sleep(100);
    r = await page(app, '/first');
  }
  assert.is(r.status, 200, r.text);
  assert.match(r.text, /^hello from the container pid=\d+ path=\/first xff=127\.0\.0\.1$/);
  const h2 = await new Promise<string>((resolve, reject) => {
    const s = h2connect(`https://${app.slug}.localhost:${d.https}`, {
      ca: readFileSync(d.daemon.tls.caFile!),
      lookup: (_h, o, cb) => (cb as any)(null, o.all ? [{ address: '127.0.0.1', family: 4 }] : '127.0.0.1', 4),
    });
    s.on('error', reject);
    const q = s.request({ ':path': '/h2' });
    let body = '';
    q.on('data', (c) => (body += c));
    q.on('end', () => (s.close(), resolve(body)));
    q.on('error', reject);
    q.end();
  });
  assert.match(h2, /path=\/h2/);
});

test('the server sleeps after idleTimeout (state sleeping) and the next request is answered from a wake', async () => {
  const pid1 = /pid=(\d+)/.exec((await page(app)).text)![1];
  await until('sleep', () => rtState(app.id) === 'sleeping', IDLE + 10_000);
  assert.is(await apiState(app), 'sleeping');
  const t0 = Date.now();
  const r = await page(app, '/after-sleep');
  assert.is(r.status, 200, r.text);
  assert.match(r.text, /path=\/after-sleep/);
  assert.is.not(/pid=(\d+)/.exec(r.text)![1], pid1);
  assert.is(await apiState(app), 'running');
  console.log(`   (wake → first answer: ${Date.now() - t0} ms)`);
  runShBefore = await runShStarts(app.id);
});

test('50 concurrent requests during one wake: 1 start, 50 answers', async () => {
  await until('sleep', () => rtState(app.id) === 'sleeping', IDLE + 10_000);
  const startsBefore = d.daemon.presence.starts;
  const replies = await Promise.all(Array.from({ length: 50 }, (_, i) => page(app, `/crowd${i}`)));
  assert.is(d.daemon.presence.starts - startsBefore, 1);
  assert.equal(
    replies.map((r) => r.status),
    Array(50).fill(200),
  );
  assert.equal(replies.map((r) => /path=(\S+)/.exec(r.text)![1]).sort(), Array.from({ length: 50 }, (_, i) => `/crowd${i}`).sort());
  const pids = new Set(replies.map((r) => /pid=(\d+)/.exec(r.text)![1]));
  assert.is(pids.size, 1, 'one app process answered all of them');
  assert.is(await runShStarts(app.id), runShBefore + 1, 'the supervisor started run.sh once for this wake');
});

test('a long WebSocket keeps the server awake; after it closes the server sleeps', async () => {
  const ws = new WebSocket(`ws://127.0.0.1:${d.http}/`, { headers: { host: `${app.slug}.localhost` } });
  await new Promise((r, j) => (ws.once('open', r), ws.once('error', j)));
  try {
    await sleep(IDLE * 2 + 1000);
    assert.is(rtState(app.id), 'running');
    const echo = new Promise<string>((r) => ws.once('message', (m) => r(m.toString())));
    ws.send('still awake');
    assert.is(await echo, 'still awake');
  } finally {
    ws.close();
  }
  await until('sleep after close', () => rtState(app.id) === 'sleeping', IDLE + 10_000);
});

test('static /root/www of a sleeping server is served without waking it', async () => {
  site = await create(app.key);
  const w = await sh(
    d.daemon.runtime,
    site.id,
    'mkdir -p /root/www && echo "<p>static in a container</p>" > /root/www/index.html && ln -s /etc/shadow /root/www/shadow',
  );
  assert.is(w.code, 0, w.err);
  await until('sleep', () => rtState(site.id) === 'sleeping', IDLE + 10_000);
  const starts = d.daemon.presence.starts;
  const r = await page(site);
  assert.is(r.text, '<p>static in a container</p>\n');
  const shadow = await page(site, '/shadow');
  assert.is(shadow.status, 200, "the container's own /etc/shadow (a file of the image) is its owner's to publish");
  assert.not.ok(shadow.text.includes(readFileSync('/etc/shadow', 'utf8').split('\n')[0]), "never the host's");
  assert.is(d.daemon.presence.starts, starts);
  assert.is(rtState(site.id), 'sleeping');
});

test.run();
