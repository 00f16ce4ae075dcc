// Sleep, wake and the static ↔ app switch, through the real edge and proxy, with servers whose
// "container" is a plain process (ProcessRuntime: really stopped, really started, binding its
// port some time after start). The same behaviours with runc containers are in containers.test.ts.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import type { Site } from '../../src/proxy/index.js';
import { get, sitesOf, startEdge, testConfig, DOMAIN, type TestEdge } from './helpers.js';
import { freePort, ProcessRuntime } from '../helpers/procruntime.js';

const top = mkdtempSync(join(tmpdir(), 'rbx-wake-'));
const rt = new ProcessRuntime();
const sites = sitesOf([]);
let edge: TestEdge;
const IDLE = 800;

async function addServer(slug: string, opts: { runSh?: boolean; www?: string; bindDelay?: number; neverSleep?: boolean } = {}): Promise<Site> {
  const rootfs = join(top, slug);
  mkdirSync(join(rootfs, 'root/www'), { recursive: true });
  if (opts.runSh !== false) {
    writeFileSync(join(rootfs, 'root/run.sh'), '#!/bin/sh\nexec my-app\n');
    chmodSync(join(rootfs, 'root/run.sh'), 0o755);
  }
  if (opts.www) writeFileSync(join(rootfs, 'root/www/index.html'), opts.www);
  const port = await freePort();
  rt.add(`srv_${slug}`, slug, rootfs, port, { bindDelay: opts.bindDelay ?? 0 });
  const site: Site = { id: `srv_${slug}`, slug, rootfs, upstream: { host: '127.0.0.1', port }, neverSleep: opts.neverSleep ?? false, suspended: false };
  sites.list.push(site);
  return site;
}

const host = (s: Site) => `${s.slug}.${DOMAIN}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

test.before(async () => {
  edge = await startEdge({
    sites,
    runtime: rt,
    cfg: testConfig({
      idleTimeout: IDLE,
      idleCheckInterval: 100,
      wakeTimeout: '5s',
      holdLimit: 60,
      holdBodyLimit: 64 * 1024,
      publishCheckInterval: 200,
      appStartGrace: '300ms',
    }),
  });
});

test.after(async () => {
  await edge?.stop();
  await rt.stopAll();
  rmSync(top, { recursive: true, force: true });
});

test('a server sleeps after idleTimeout and the next request is answered from a wake', async () => {
  const s = await addServer('sleepy');
  const first = await get(edge.http, host(s), '/one');
  assert.is(first.status, 200);
  const pid1 = JSON.parse(first.text).pid;
  assert.is(edge.proxy.state(s.id), 'running');
  await until('sleep', () => rt.get(s.id)!.state === 'sleeping', IDLE + 2000);
  assert.is(edge.proxy.state(s.id), 'sleeping');
  const second = await get(edge.http, host(s), '/two');
  assert.is(second.status, 200);
  assert.is(JSON.parse(second.text).url, '/two');
  assert.is.not(JSON.parse(second.text).pid, pid1, 'answered by a freshly started app');
});

test('50 concurrent requests during one wake cause 1 start and get 50 answers', async () => {
  const s = await addServer('crowd', { bindDelay: 300 });
  const before = rt.starts;
  const replies = await Promise.all(Array.from({ length: 50 }, (_, i) => get(edge.http, host(s), `/r${i}`)));
  assert.is(rt.starts - before, 1);
  assert.equal(
    replies.map((r) => r.status),
    Array(50).fill(200),
  );
  assert.equal(replies.map((r) => JSON.parse(r.text).url).sort(), Array.from({ length: 50 }, (_, i) => `/r${i}`).sort());
});

test('state reads waking while the server starts, then running', async () => {
  const s = await addServer('stately', { bindDelay: 400 });
  assert.is(edge.proxy.state(s.id), 'sleeping');
  const pending = get(edge.http, host(s), '/');
  await until('waking', () => edge.proxy.state(s.id) === 'waking', 2000);
  assert.is((await pending).status, 200);
  assert.is(edge.proxy.state(s.id), 'running');
});

test('a held request body (larger than the buffer limit) reaches the app intact after the wake', async () => {
  const s = await addServer('poster', { bindDelay: 200 });
  const body = Buffer.alloc(3 * 1024 * 1024, 9);
  const r = await get(edge.http, host(s), '/upload', { method: 'POST', body, headers: { 'content-type': 'application/octet-stream' } });
  assert.is(r.status, 200);
  assert.is(JSON.parse(r.text).bodyLength, body.length);
});

test('more requests than holdLimit during a wake: the extra ones get 503 with Retry-After', async () => {
  const s = await addServer('flood', { bindDelay: 800 });
  const replies = await Promise.all(Array.from({ length: 70 }, () => get(edge.http, host(s), '/')));
  const ok = replies.filter((r) => r.status === 200).length;
  const busy = replies.filter((r) => r.status === 503);
  assert.is(ok, 60);
  assert.is(busy.length, 10);
  assert.is(busy[0].headers['retry-after'], '2');
  assert.is(JSON.parse(busy[0].text).error, 'wake_queue_full');
});

test('a run.sh that never binds port 80 gives a 504 page after the wake timeout', async () => {
  const s = await addServer('mute', { bindDelay: -1 });
  const started = Date.now();
  const r = await get(edge.http, host(s), '/', { headers: { accept: 'text/html' } });
  assert.is(r.status, 504);
  assert.match(r.text, /port 80/);
  assert.match(r.text, /run\.sh\.log/);
  const took = Date.now() - started;
  assert.ok(took >= 4900 && took < 9000, `took ${took} ms`);
});

test('a long WebSocket keeps the server awake; once closed, it sleeps', async () => {
  const s = await addServer('chatty');
  const ws = new WebSocket(`ws://127.0.0.1:${edge.http}/`, { headers: { host: host(s) } });
  await new Promise((r, j) => (ws.once('open', r), ws.once('error', j)));
  await sleep(IDLE * 3);
  assert.is(rt.get(s.id)!.state, 'running');
  const echo = new Promise<string>((r) => ws.once('message', (m) => r(m.toString())));
  ws.send('still here');
  assert.is(await echo, 'still here');
  ws.close();
  await until('sleep after the WebSocket closed', () => rt.get(s.id)!.state === 'sleeping', IDLE + 2000);
});

test('a WebSocket to a sleeping server wakes it', async () => {
  const s = await addServer('wsake', { bindDelay: 100 });
  const ws = new WebSocket(`ws://127.0.0.1:${edge.http}/`, { headers: { host: host(s) } });
  await new Promise((r, j) => (ws.once('open', r), ws.once('error', j)));
  const echo = new Promise<string>((r) => ws.once('message', (m) => r(m.toString())));
  ws.send('woken');
  assert.is(await echo, 'woken');
  ws.close();
});

test('never_sleep servers never sleep', async () => {
  const s = await addServer('insomniac', { neverSleep: true });
  assert.is((await get(edge.http, host(s), '/')).status, 200);
  await sleep(IDLE * 2.5);
  assert.is(rt.get(s.id)!.state, 'running');
  await rt.stop(s.id);
});

test('Presence: concurrent wake() callers share one start; hold() keeps a server awake until released', async () => {
  const s = await addServer('sshuser');
  const before = rt.starts;
  await Promise.all([edge.proxy.presence.wake(s.id), edge.proxy.presence.wake(s.id), edge.proxy.presence.wake(s.id)]);
  assert.is(rt.starts - before, 1);
  const release = edge.proxy.presence.hold(s.id);
  await sleep(IDLE * 2.5);
  assert.is(rt.get(s.id)!.state, 'running');
  release();
  await until('sleep after release', () => rt.get(s.id)!.state === 'sleeping', IDLE + 2000);
});

test('static pages of a sleeping server are served without waking it', async () => {
  const s = await addServer('brochure', { runSh: false, www: '<p>static</p>' });
  const before = rt.starts;
  const r = await get(edge.http, host(s), '/');
  assert.is(r.text, '<p>static</p>');
  assert.is(rt.starts, before);
  assert.is(rt.get(s.id)!.state, 'sleeping');
});

test('run.sh appearing switches the subdomain to the app within ~1 s; run.sh going away switches back, app untouched', async () => {
  const s = await addServer('switcher', { runSh: false, www: '<p>before</p>' });
  await edge.proxy.presence.wake(s.id); // the server is up (say, someone is logged in over SSH)
  const keep = edge.proxy.presence.hold(s.id);
  try {
    assert.is((await get(edge.http, host(s), '/')).text, '<p>before</p>');
    writeFileSync(join(s.rootfs, 'root/run.sh'), '#!/bin/sh\nexec my-app\n');
    chmodSync(join(s.rootfs, 'root/run.sh'), 0o755);
    const t0 = Date.now();
    let r = await get(edge.http, host(s), '/');
    while (!r.text.includes('"pid"') && Date.now() - t0 < 3000) {
      await sleep(50);
      r = await get(edge.http, host(s), '/');
    }
    const switched = Date.now() - t0;
    assert.ok(r.text.includes('"pid"'), 'never switched to the app');
    assert.ok(switched < 1200, `switch took ${switched} ms`);
    const pid = JSON.parse(r.text).pid;
    unlinkSync(join(s.rootfs, 'root/run.sh'));
    await sleep(400);
    assert.is((await get(edge.http, host(s), '/')).text, '<p>before</p>');
    assert.is(rt.servers.get(s.id)!.child?.pid, pid, 'the app process was not killed');
  } finally {
    keep();
  }
});

test.run();
