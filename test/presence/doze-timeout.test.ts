// The end of a doze with real runc: a server dozing for proxy.dozeTimeout is stopped (container
// gone, memory freed) and the next request starts it anew; a dozing server with an open (quiet)
// WebSocket is not stopped while it is open; a never_sleep server neither dozes nor sleeps; and a
// daemon that restarts while a server dozes keeps it frozen and adopts it as dozing (the doze
// outlives the daemon; doze-restart.test.ts kills a real daemon process for it).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import WebSocket from 'ws';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { IdleTracker } from '../../src/presence/index.js';
import { createLogger } from '../../src/log/index.js';
import { reconcile } from '../../src/runtime/reconcile.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { sh } from '../runtime/helpers/env.js';
import { get } from '../proxy/helpers.js';
import { DOZE_APP_PY, DOZE_RUN_SH, fields } from './dozeapp.js';
import { sleep, until } from '../helpers/wait.js';

const IDLE = 1000;
const DOZE = 2500;
let d: TestDaemon;

interface Made {
  id: string;
  key: string;
  slug: string;
}

const presence = () => d.daemon.presence;
const rt = () => d.daemon.runtime as ContainerRuntime;
const page = (m: Made, path = '/') => get(d.http, `${m.slug}.localhost`, path);

async function create(): Promise<Made> {
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(r.status, 200, r.text);
  const b = JSON.parse(r.text);
  const m = { id: b.id, key: b.api_key, slug: String(b.subdomain).split('.')[0] };
  const w = await sh(d.daemon.runtime, m.id, `cat > /root/app.py && cat > /root/run.sh <<'EOF'\n${DOZE_RUN_SH}EOF\nchmod +x /root/run.sh`, DOZE_APP_PY);
  assert.is(w.code, 0, w.err);
  await until('the app answers', async () => (await page(m, '/up')).text.startsWith('pid='), 30_000);
  return m;
}

let a: Made;

test.before(async () => {
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    hosting: { anonServersPerIp: 5 },
    proxy: { idleTimeout: IDLE, idleCheckInterval: 200, dozeTimeout: DOZE, dozeMemoryFloor: 0, wakeTimeout: '20s' },
  });
  a = await create();
});

test.after(async () => {
  await d?.stop();
});

test('a server dozing for dozeTimeout is stopped; the next request starts it anew', async () => {
  const before = fields((await page(a, '/before')).text);
  await until('the server dozes', () => presence().isDozing(a.id), IDLE + 5000);
  const dozedAt = Date.now();
  assert.is(d.daemon.runtime.get(a.id)?.state, 'running');
  await until('the server is stopped', () => d.daemon.runtime.get(a.id)?.state === 'sleeping', DOZE + 10_000);
  assert.ok(Date.now() - dozedAt >= DOZE - 300, `not before dozeTimeout (${Date.now() - dozedAt} ms)`);
  assert.not.ok(presence().isDozing(a.id));
  const after = (await rt().runc.state(a.id))?.status;
  assert.ok(after === undefined || after === 'created', `the container is gone or parked (runtime.parkOnSleep), not ${after}`);
  const starts = presence().starts;
  const r = await page(a, '/after');
  assert.is(r.status, 200, r.text);
  assert.is.not(fields(r.text).pid, before.pid, 'a new app process');
  assert.is(presence().starts, starts + 1);
});

test('a dozing server with an open quiet WebSocket is not stopped while it is open', async () => {
  await page(a, '/ws-before');
  const ws = new WebSocket(`ws://127.0.0.1:${d.http}/`, { headers: { host: `${a.slug}.localhost` } });
  await new Promise((r, j) => (ws.once('open', r), ws.once('error', j)));
  try {
    await until('the server dozes', () => presence().isDozing(a.id), IDLE + 5000);
    await sleep(DOZE + 1000);
    assert.ok(presence().isDozing(a.id), 'still dozing, not stopped');
    const echo = new Promise<string>((r) => ws.once('message', (m) => r(m.toString())));
    ws.send('hello');
    assert.is(await echo, 'hello');
  } finally {
    ws.close();
  }
  await until('stopped once the socket closed', () => d.daemon.runtime.get(a.id)?.state === 'sleeping', IDLE + DOZE + 10_000);
});

test('a never_sleep server neither dozes nor sleeps; one made never_sleep while dozing is thawed', async () => {
  await page(a, '/ns');
  await until('the server dozes', () => presence().isDozing(a.id), IDLE + 5000);
  d.daemon.store.servers.update(a.id, () => ({ neverSleep: true }));
  await until('thawed', () => !presence().isDozing(a.id), 2000);
  assert.is((await rt().runc.state(a.id))?.status, 'running');
  await sleep(IDLE + DOZE + 1000);
  assert.not.ok(presence().isDozing(a.id));
  assert.is(d.daemon.runtime.get(a.id)?.state, 'running');
  d.daemon.store.servers.update(a.id, () => ({ neverSleep: false }));
});

test('reconcile (a daemon starting anew) adopts a container left frozen without thawing it, and a new idle tracker adopts it as dozing', async () => {
  const before = fields((await page(a, '/r')).text);
  await until('the server dozes', () => presence().isDozing(a.id), IDLE + 5000);
  assert.is((await rt().runc.state(a.id))?.status, 'paused');
  // a new runtime over the same store and host, as a restarted daemon makes it
  const fresh = new ContainerRuntime(rt().deps);
  const report = await reconcile(fresh);
  assert.ok(report.adopted.includes(a.id), JSON.stringify(report));
  assert.is((await rt().runc.state(a.id))?.status, 'paused', 'still frozen');
  assert.is(fresh.get(a.id)?.state, 'running');
  const frozen = fresh.frozen(a.id);
  assert.ok(frozen && frozen.memoryBytes > 0, `the memory it holds frozen: ${JSON.stringify(frozen)}`);
  // and the restarted daemon's tracker: dozing, shown sleeping
  const tracker = new IdleTracker({
    runtime: fresh,
    neverSleep: () => false,
    idleTimeout: IDLE,
    checkInterval: 200,
    dozeTimeout: DOZE,
    log: createLogger({ level: 'error', sink: () => {} }),
  });
  tracker.start();
  try {
    assert.ok(tracker.isDozing(a.id));
    assert.is(tracker.state(a.id), 'sleeping');
    assert.ok(tracker.needsWake(a.id), 'a request waits for its thaw');
  } finally {
    tracker.stop();
  }
  // the running daemon's tracker also knows it dozes: a request thaws it and the same app answers
  assert.is(fields((await page(a, '/r2')).text).pid, before.pid);
  assert.is((await rt().runc.state(a.id))?.status, 'running');
});

test.run();
