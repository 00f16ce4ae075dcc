// Failed host commands never reach clients: a real daemon whose real runc fails (its state root
// replaced by a file, so `runc create` itself fails with a message naming the data dir). The
// client gets a generic answer with the request id; the log gets the command, its stderr, the stack.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { get, raw, type Res } from '../proxy/helpers.js';
import { RUN_SH, sh } from '../runtime/helpers/env.js';

let d: TestDaemon;

test.before(async () => {
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    hosting: { anonServersPerIp: 5, rateLimit: { createsPerIpPerHour: 1000 } },
    proxy: { idleTimeout: '10m', wakeTimeout: '20s' },
  });
});
test.after(async () => {
  await d?.stop();
});

/** Runs fn while runc's state root is a file: every `runc create` fails (a real runc failure). */
async function withBrokenRunc<T>(fn: () => Promise<T>): Promise<T> {
  const root = join(d.dataDir, 'runc');
  const held = `${root}.held`;
  const had = existsSync(root);
  if (had) renameSync(root, held);
  writeFileSync(root, '');
  try {
    return await fn();
  } finally {
    rmSync(root, { force: true });
    if (had) renameSync(held, root);
  }
}

/** Nothing of the host in an answer: no data dir, no runc, no tool output. */
function assertNothingOfTheHost(r: Res): void {
  const text = `${JSON.stringify(r.headers)}\n${r.text}`;
  for (const s of new Set([d.dataDir, realpathSync(d.dataDir), '/tmp/', 'runc', 'mkdir', 'not a directory', 'srv_'])) {
    assert.not.ok(text.includes(s), `answer mentions ${JSON.stringify(s)}: ${r.text}`);
  }
}

const logged = (msg: string, rid: string) => d.logs.find((l) => l.msg === msg && l.rid === rid) as Record<string, any> | undefined;

test('a create that runc fails answers a generic 5xx with the request id; the log has the command, its stderr and the stack', async () => {
  const r = await withBrokenRunc(() => get(d.http, 'api.localhost', '/create', { method: 'POST' }));
  assert.ok(r.status >= 500, `status ${r.status}: ${r.text}`);
  assertNothingOfTheHost(r);
  const body = JSON.parse(r.text);
  assert.is(body.request_id, r.headers['x-request-id']);
  const line = logged('request failed', body.request_id) ?? logged('unexpected error', body.request_id);
  assert.ok(line, 'the failure is logged with the request id');
  const failure = line.cause ?? line.err;
  assert.is(failure.command, 'runc');
  assert.ok(failure.args.includes('create'));
  assert.match(failure.stderr, /not a directory/);
  assert.ok(failure.stderr.includes(d.dataDir), 'the log keeps the path runc named');
  assert.match(failure.stack, /CommandError/);
  // nothing is left of the failed create, and the next one works
  assert.is(d.daemon.runtime.list().length, 0);
  const ok = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(ok.status, 200, ok.text);
});

test('a wake that fails shows a subdomain visitor a generic page with the request id; the log has why, the server and the request', async () => {
  const made = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(made.status, 200, made.text);
  const { id, api_key: key } = JSON.parse(made.text);
  const view = JSON.parse((await get(d.http, 'api.localhost', `/servers/${id}`, { headers: { authorization: `Bearer ${key}` } })).text);
  const slug = String(view.subdomain).split('.')[0];
  const w = await sh(d.daemon.runtime, id, `mkdir -p /root/www && echo woke > /root/www/index.html && cat > /root/run.sh && chmod +x /root/run.sh`, RUN_SH);
  assert.is(w.code, 0, w.err);
  await d.daemon.runtime.stop(id);

  const [html, json, ws] = await withBrokenRunc(
    async () =>
      [
        await get(d.http, `${slug}.localhost`, '/', { headers: { accept: 'text/html' } }),
        await get(d.http, `${slug}.localhost`, '/'),
        await raw(
          d.http,
          `GET / HTTP/1.1\r\nHost: ${slug}.localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`,
        ),
      ] as const,
  );
  for (const r of [html, json]) {
    assert.is(r.status, 503, r.text);
    assertNothingOfTheHost(r);
    const rid = String(r.headers['x-request-id']);
    assert.ok(r.text.includes(rid), 'the page names the request id');
    const line = logged('wake failed', rid);
    assert.ok(line, 'the wake failure is logged with the request id');
    assert.is(line.server, id);
    assert.is(line.err.command, 'runc');
    assert.match(line.err.stderr, /not a directory/);
    assert.match(line.err.stack, /CommandError/);
  }
  // a WebSocket handshake gets the same, on its raw socket
  const [wsHead, wsBody] = ws.split('\r\n\r\n');
  assert.match(wsHead, /^HTTP\/1\.1 503 /);
  assertNothingOfTheHost({ status: 503, headers: {}, body: Buffer.from(ws), text: ws });
  const wsRid = /x-request-id: (\S+)/i.exec(wsHead)?.[1];
  assert.ok(wsRid && JSON.parse(wsBody).request_id === wsRid, wsHead);
  assert.ok(logged('wake failed', wsRid!), 'the WebSocket wake failure is logged with its request id');
  assert.match(html.text, /<h1>503 · the server could not be started<\/h1>/);
  assert.is(JSON.parse(json.text).error, 'wake_failed');

  // the failure is not sticky: with runc back, the next visit wakes the server (generous deadline:
  // the app is python, slow to start on a loaded machine)
  let last = '';
  for (const t0 = Date.now(); last !== 'woke\n' && Date.now() - t0 < 60_000;) {
    last = await get(d.http, `${slug}.localhost`, '/').then(
      (r) => r.text,
      (e: Error) => e.message,
    );
    if (last !== 'woke\n') await new Promise((res) => setTimeout(res, 200));
  }
  assert.is(last, 'woke\n');
});

test.run();
