// Exposed TCP ports (POST /expose) with a real daemon and a real runc container: each direction
// ends on its own (a client's FIN reaches the container and the answer still comes back; a
// container's FIN reaches the client and what the client sends afterwards still reaches the
// container), the pair closes once both are done, the server is no longer held awake after it,
// and the bytes the client received are what is billed.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect } from 'node:net';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { sh } from '../runtime/helpers/env.js';
import { get } from './helpers.js';

let d: TestDaemon;

/** Two TCP services (python standard library), started by run.sh:
 *  7000 reads until the client's FIN, then answers "got N bytes: <data>\n" and 1 MB, and closes;
 *  7001 says "hello\n", shuts down its own write side, then keeps what the client still sends
 *  until its FIN in /tmp/late.txt. */
const APP_PY = String.raw`
import socket, threading, time
def serve(port, handler):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    def loop():
        while True:
            c, _ = s.accept()
            threading.Thread(target=handler, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
def read_all(c):
    data = b""
    while True:
        d = c.recv(65536)
        if not d: return data
        data += d
def after_eof(c):
    data = read_all(c)
    c.sendall(b"got %d bytes: %s\n" % (len(data), data) + b"z" * 1000000)
    c.close()
def first(c):
    c.sendall(b"hello\n")
    c.shutdown(socket.SHUT_WR)
    data = read_all(c)
    with open("/tmp/late.txt", "wb") as f: f.write(data)
    c.close()
serve(7000, after_eof)
serve(7001, first)
while True: time.sleep(3600)
`;

let id = '';
let key = '';
const publicPort: Record<number, number> = {};
const billed = new Map<string, number>();
const billedOf = (s: string) => billed.get(s) ?? 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, cond: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

async function expose(port: number): Promise<number> {
  const r = await get(d.http, 'api.localhost', '/expose', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ server: id, port }),
  });
  assert.is(r.status, 200, r.text);
  return Number(JSON.parse(r.text).public.split(':')[1]);
}

test.before(async () => {
  d = await startTestDaemon({ publicIp: '127.0.0.1', hosting: { portPool: `${25300 + (process.pid % 40) * 10}-${25309 + (process.pid % 40) * 10}` } });
  const meter = d.daemon.billing.meter;
  const add = meter.addEgress.bind(meter);
  meter.addEgress = (s: string, n: number) => {
    billed.set(s, billedOf(s) + n);
    add(s, n);
  };
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(r.status, 200, r.text);
  ({ id, api_key: key } = JSON.parse(r.text));
  const w = await sh(
    d.daemon.runtime,
    id,
    `cat > /root/app.py && printf '#!/bin/bash\\nexec python3 /root/app.py\\n' > /root/run.sh && chmod +x /root/run.sh`,
    APP_PY,
  );
  assert.is(w.code, 0, w.err);
  publicPort[7000] = await expose(7000);
  publicPort[7001] = await expose(7001);
  await until('the services listen', async () => (await sh(d.daemon.runtime, id, 'cat /proc/net/tcp')).out.includes(':1B59'), 30_000);
});

test.after(async () => {
  await d?.stop();
});

test('printf ping | socat - TCP:host:port through /expose gets the answer: the FIN reaches the container, and the answer is billed', async () => {
  const before = billedOf(id);
  const r = await run('sh', ['-c', `printf ping | socat -t 10 - TCP:127.0.0.1:${publicPort[7000]}`], { timeoutMs: 30_000 });
  assert.is(r.code, 0, r.stderr);
  assert.ok(r.stdout.startsWith('got 4 bytes: ping\n'), `answer: ${JSON.stringify(r.stdout.slice(0, 80))}`);
  const answer = 'got 4 bytes: ping\n'.length + 1_000_000;
  assert.is(r.stdout.length, answer, 'the whole answer, then the end');
  await until('the connection released its hold on the server', () => !d.daemon.presence.busy(id), 5000);
  await until('the egress reported', () => billedOf(id) - before >= answer, 5000);
  assert.is(billedOf(id) - before, answer, 'billed: the bytes the client received');
});

test('a container that shuts down its write side first: the client sees the end and what it sends afterwards still reaches the container', async () => {
  await sh(d.daemon.runtime, id, 'rm -f /tmp/late.txt');
  const got = await new Promise<string>((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port: publicPort[7001], allowHalfOpen: true });
    let text = '';
    s.on('data', (c) => (text += c));
    s.on('end', () => {
      // the container's FIN came through; our side is still open for writing
      setTimeout(() => s.end('late data after the server half-closed'), 200);
    });
    s.on('close', () => resolve(text));
    s.on('error', reject);
    setTimeout(() => reject(new Error(`no close; got ${JSON.stringify(text)}`)), 15_000).unref();
  });
  assert.is(got, 'hello\n');
  await until('the container kept the late data', async () => (await sh(d.daemon.runtime, id, 'cat /tmp/late.txt 2>/dev/null')).out !== '', 5000);
  assert.is((await sh(d.daemon.runtime, id, 'cat /tmp/late.txt')).out, 'late data after the server half-closed');
  await until('the connection released its hold on the server', () => !d.daemon.presence.busy(id), 5000);
});

test.run();
