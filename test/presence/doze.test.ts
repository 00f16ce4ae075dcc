// Doze with real runc: an idle run.sh server is frozen (cgroup freezer; runc says paused), shows
// `sleeping`, keeps its processes and memory, and is not billed for RAM; an HTTP request, an
// OpenSSH login and a connection to an exposed port each thaw it — the same processes answer, no
// start. Keep-alive connections, a quiet WebSocket and a quiet exposed-port connection held open
// across a doze keep working after the thaw, and the app's timers and clocks go on sanely.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { sh } from '../runtime/helpers/env.js';
import { CLIENT_OPTS } from '../ssh/helpers/env.js';
import { get } from '../proxy/helpers.js';
import { DOZE_APP_PY, DOZE_RUN_SH, fields } from './dozeapp.js';
import { sleep, until } from '../helpers/wait.js';

const IDLE = 1500;
const GB = 1024 ** 3;
const HOUR = 3_600_000;
let d: TestDaemon;
let id = '';
let key = '';
let slug = '';
let keyFile = '';
let tcpPort = 0;
const work = mkdtempSync(join(tmpdir(), 'rbx-doze-'));

const presence = () => d.daemon.presence;
const page = (path = '/') => get(d.http, `${slug}.localhost`, path);
async function apiState(): Promise<string> {
  const r = await get(d.http, 'api.localhost', `/servers/${id}`, { headers: { authorization: `Bearer ${key}` } });
  return JSON.parse(r.text).state;
}
const runcStatus = async () => (await (d.daemon.runtime as ContainerRuntime).runc.state(id))?.status;
/** Waits until the server dozes, and checks what a doze is: runc paused, API sleeping, runtime running. */
async function dozed(): Promise<void> {
  await until('the server dozes', () => presence().isDozing(id), IDLE + 10_000);
  assert.is(await runcStatus(), 'paused', 'its processes are frozen');
  assert.is(await apiState(), 'sleeping');
  assert.is(d.daemon.runtime.get(id)?.state, 'running', 'the container itself stays');
}

test.before(async () => {
  const base = 26100 + (process.pid % 40) * 10;
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    hosting: { portPool: `${base}-${base + 9}` },
    proxy: { idleTimeout: IDLE, idleCheckInterval: 200, dozeTimeout: '1h', dozeMemoryFloor: 0, wakeTimeout: '20s' },
  });
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(r.status, 200, r.text);
  const b = JSON.parse(r.text);
  ({ id, api_key: key } = b);
  slug = String(b.subdomain).split('.')[0];
  keyFile = join(work, 'key');
  writeFileSync(keyFile, b.ssh_private_key, { mode: 0o600 });
  const w = await sh(d.daemon.runtime, id, `cat > /root/app.py && cat > /root/run.sh <<'EOF'\n${DOZE_RUN_SH}EOF\nchmod +x /root/run.sh`, DOZE_APP_PY);
  assert.is(w.code, 0, w.err);
  const x = await get(d.http, 'api.localhost', '/expose', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ server: id, port: 7000 }),
  });
  assert.is(x.status, 200, x.text);
  tcpPort = Number(JSON.parse(x.text).public.split(':')[1]);
  await until('the app answers', async () => (await page('/up')).text.startsWith('pid='), 30_000);
});

test.after(async () => {
  await d?.stop();
  rmSync(work, { recursive: true, force: true });
});

test('an idle server dozes (frozen, sleeping) and an HTTP request thaws it: the same process answers, nothing started', async () => {
  const before = fields((await page('/before')).text);
  await dozed();
  const starts = presence().starts;
  const thaws = presence().thaws;
  const t0 = performance.now();
  const r = await page('/after');
  const ms = performance.now() - t0;
  assert.is(r.status, 200, r.text);
  const after = fields(r.text);
  assert.is(after.pid, before.pid, 'the app process kept running through the doze');
  assert.is(after.path, '/after');
  assert.is(presence().starts, starts, 'no start');
  assert.is(presence().thaws, thaws + 1, 'one thaw');
  assert.is(await runcStatus(), 'running');
  assert.is(await apiState(), 'running');
  console.log(`   (doze → answer: ${ms.toFixed(1)} ms)`);
});

test("a kept-alive connection across a doze keeps working, and the app's timers and clocks go on after the thaw", async () => {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const ask = (path: string) =>
    new Promise<{ text: string; reused: boolean }>((resolve, reject) => {
      const q = request({ host: '127.0.0.1', port: d.http, path, agent, headers: { host: `${slug}.localhost` } }, (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ text, reused: q.reusedSocket }));
      });
      q.on('error', reject);
      q.end();
    });
  try {
    const a = fields((await ask('/ka1')).text);
    await dozed();
    const frozenFor = Date.now();
    await sleep(1000); // a second frozen: the ticker's thread does not run
    const second = await ask('/ka2');
    assert.ok(second.reused, 'the same client connection carried the request after the doze');
    const b = fields(second.text);
    assert.is(b.pid, a.pid);
    assert.ok(Math.abs(b.wall * 1000 - Date.now()) < 2000, `the app's wall clock is the host's (${b.wall})`);
    assert.ok(b.mono - a.mono >= (Date.now() - frozenFor) / 1000 - 0.5, 'its monotonic clock went on while frozen');
    await sleep(500);
    const c = fields((await ask('/ka3')).text);
    assert.ok(c.ticks - b.ticks >= 2, `its 100 ms timer runs again after the thaw (${b.ticks} → ${c.ticks})`);
    assert.ok(c.ticks - b.ticks <= 10, `and does not race to catch up (${b.ticks} → ${c.ticks})`);
  } finally {
    agent.destroy();
  }
});

test('a quiet WebSocket lets the server doze; its next message thaws it and is echoed on the same socket', async () => {
  const ws = new WebSocket(`ws://127.0.0.1:${d.http}/`, { headers: { host: `${slug}.localhost` } });
  await new Promise((r, j) => (ws.once('open', r), ws.once('error', j)));
  const next = () => new Promise<string>((r) => ws.once('message', (m) => r(m.toString())));
  try {
    let echo = next();
    ws.send('before');
    assert.is(await echo, 'before');
    await dozed();
    assert.ok(presence().busy(id), 'the open WebSocket still counts');
    const thaws = presence().thaws;
    echo = next();
    ws.send('after the doze');
    assert.is(await echo, 'after the doze');
    assert.is(presence().thaws, thaws + 1);
  } finally {
    ws.close();
  }
});

test('a WebSocket the app keeps sending on keeps the server awake', async () => {
  const ws = new WebSocket(`ws://127.0.0.1:${d.http}/`, { headers: { host: `${slug}.localhost` } });
  await new Promise((r, j) => (ws.once('open', r), ws.once('error', j)));
  let got = 0;
  ws.on('message', () => got++);
  try {
    ws.send('push');
    await sleep(IDLE * 2 + 1000);
    assert.not.ok(presence().isDozing(id), 'no doze while the app sends');
    assert.ok(got > 5, `the app's frames came (${got})`);
  } finally {
    ws.close();
  }
});

test('an OpenSSH login thaws a dozing server: the app process is the one from before', async () => {
  const before = fields((await page('/ssh-before')).text);
  await dozed();
  const starts = presence().starts;
  const r = await run('ssh', ['-p', String(d.daemon.ssh.port), '-i', keyFile, ...CLIENT_OPTS, 'root@127.0.0.1', 'pgrep -f app.py'], { timeoutMs: 30_000 });
  assert.is(r.code, 0, r.stderr);
  assert.ok(r.stdout.split(/\s+/).includes(String(before.pid)), `the app's pid ${before.pid} is alive: ${r.stdout}`);
  assert.is(presence().starts, starts, 'no start');
  assert.not.ok(presence().isDozing(id));
});

function tcp(): Promise<{ s: Socket; say(text: string): Promise<string> }> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port: tcpPort });
    s.setEncoding('utf8');
    s.once('error', reject);
    s.once('connect', () =>
      resolve({
        s,
        say: (text) =>
          new Promise<string>((r, j) => {
            let got = '';
            const t = setTimeout(() => j(new Error(`no echo of ${text}; got ${JSON.stringify(got)}`)), 10_000);
            const on = (c: string) => {
              got += c;
              if (got.length >= text.length) (clearTimeout(t), s.off('data', on), r(got));
            };
            s.on('data', on);
            s.write(text);
          }),
      }),
    );
  });
}

test('a connection to an exposed port thaws a dozing server; a quiet one lets it doze and its next bytes thaw it', async () => {
  await dozed();
  const starts = presence().starts;
  const c = await tcp();
  try {
    assert.is(await c.say('ping\n'), 'ping\n');
    assert.is(presence().starts, starts, 'no start');
    await dozed();
    assert.is(await c.say('still there\n'), 'still there\n');
    assert.is(presence().starts, starts);
  } finally {
    c.s.destroy();
  }
});

test('no RAM is billed while the server dozes, and it is once it is awake again', async () => {
  const accountId = d.daemon.store.servers.get(id)!.accountId;
  const meter = d.daemon.billing.meter;
  await page('/bill');
  await dozed();
  const t0 = Date.now() + HOUR; // periods of an hour each, after every real tick
  await meter.tick(t0, 0);
  const ram0 = d.daemon.store.billing.usageOf(accountId).ramGbHours;
  const held = (await d.daemon.runtime.stats(id)).memoryBytes;
  assert.ok(held > 1 << 20, `the dozing server holds its memory (${held} bytes)`);
  await meter.tick(t0 + HOUR, 0);
  assert.is(d.daemon.store.billing.usageOf(accountId).ramGbHours, ram0, 'an hour dozing: no RAM charged');
  await page('/bill-awake');
  await meter.tick(t0 + 2 * HOUR, 0);
  const charged = d.daemon.store.billing.usageOf(accountId).ramGbHours - ram0;
  assert.ok(charged > (0.5 * held) / GB, `an hour awake is charged (${charged} GB-hours for ~${(held / GB).toFixed(3)} GB)`);
});

test.run();
