// Egress is billed from the bytes written to the client, through a real daemon and real runc
// containers: static files of a server without run.sh (HEAD, aborted and full downloads with
// curl over HTTP/1.1 and HTTP/2), a slow answer of an app proxied from a container and a
// WebSocket stream from it. "Billed" is what reaches the billing meter (Meter.addEgress, observed
// as it is called) and, for HEAD, what the ledger charges after a metering pass.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { connect as h2connect } from 'node:http2';
import { join } from 'node:path';
import WebSocket from 'ws';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { sh } from '../runtime/helpers/env.js';
import { get } from './helpers.js';

const MB = 1e6;
const GB = 1024 ** 3;
let d: TestDaemon;

/** An app on :80 (python standard library): GET /slow/<count>/<size>/<ms> answers count×size
 *  bytes, one piece every ms; a WebSocket that receives "<count> <size> <ms>" sends count binary
 *  messages of size bytes the same way, then waits for the client to go. */
const APP_PY = String.raw`
import base64, hashlib, socket, struct, threading, time
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def recv_until(c, buf, n):
    while len(buf) < n:
        d = c.recv(65536)
        if not d: return None
        buf += d
    return buf
def handle(c):
    try:
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d: return
            buf += d
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin1").split("\r\n")
        h = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
        if h.get("upgrade", "").lower() == "websocket":
            acc = base64.b64encode(hashlib.sha1(h["sec-websocket-key"].encode() + GUID).digest()).decode()
            c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
            buf = recv_until(c, rest, 2)
            n = buf[1] & 127
            buf = recv_until(c, buf, 6 + n)
            mask, data = buf[2:6], buf[6:6 + n]
            count, size, ms = map(int, bytes(b ^ mask[i % 4] for i, b in enumerate(data)).split())
            for _ in range(count):
                c.sendall(bytes([0x82, 126]) + struct.pack(">H", size) + b"w" * size)
                time.sleep(ms / 1000)
            while c.recv(65536): pass
            return
        _, kind, count, size, ms = lines[0].split(" ")[1].split("/")
        count, size, ms = int(count), int(size), int(ms)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % (count * size))
        for _ in range(count):
            c.sendall(b"p" * size)
            time.sleep(ms / 1000)
    except Exception:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80))
s.listen(128)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`;

interface Made {
  id: string;
  slug: string;
  key: string;
}

async function create(): Promise<Made> {
  const r = await get(d.http, 'api.localhost', '/create', { method: 'POST' });
  assert.is(r.status, 200, r.text);
  const b = JSON.parse(r.text);
  const v = await get(d.http, 'api.localhost', `/servers/${b.id}`, { headers: { authorization: `Bearer ${b.api_key}` } });
  return { id: b.id, slug: JSON.parse(v.text).subdomain.split('.')[0], key: b.api_key };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, cond: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Bytes handed to the billing meter per server, as they are reported. */
const billed = new Map<string, number>();
const billedOf = (id: string) => billed.get(id) ?? 0;
/** The billed count once it stopped moving (an answer reports its last bytes when it closes). */
async function settled(id: string): Promise<number> {
  let last = -1;
  const end = Date.now() + 15_000;
  while (Date.now() < end) {
    const now = billedOf(id);
    if (now === last) return now;
    last = now;
    await sleep(700);
  }
  return billedOf(id);
}

interface Curl {
  code: number | null;
  head: number;
  body: number;
  err: string;
}
/** curl of a path on a server's subdomain; `how` picks HTTP/1.1 over plain http or HTTP/2 over
 *  TLS. With `abortAfter`, curl's output goes to `head -c`, which leaves after that many bytes:
 *  curl's next write fails and it drops the download (exit 23), as a client cancelling would. */
async function curl(m: Made, path: string, how: 'h1' | 'h2', extra: string[] = [], abortAfter?: number): Promise<Curl> {
  const host = `${m.slug}.localhost`;
  const target =
    how === 'h1'
      ? ['--http1.1', '-H', `host: ${host}`, `http://127.0.0.1:${d.http}${path}`]
      : ['--http2', '--cacert', join(d.dataDir, 'tls', 'ca.pem'), '--resolve', `${host}:${d.https}:127.0.0.1`, `https://${host}:${d.https}${path}`];
  const args = ['-sS', '-w', '%{stderr}written %{size_header} %{size_download} %{http_version}\\n', ...extra, ...target];
  const r =
    abortAfter === undefined
      ? await run('curl', ['-o', '/dev/null', ...args], { timeoutMs: 60_000 })
      : await run('bash', ['-c', `set -o pipefail; curl "$@" | head -c ${abortAfter} >/dev/null`, 'curl', ...args], { timeoutMs: 60_000 });
  const [, head, body, version] = /written (\d+) (\d+) ([\d.]+)/.exec(r.stderr) ?? [];
  if (r.code === 0) assert.is(version, how === 'h1' ? '1.1' : '2', 'the protocol asked for');
  return { code: r.code, head: Number(head), body: Number(body), err: r.stderr };
}

/** Bytes the two kernels of a loopback connection can hold: our send buffer and curl's receive buffer at their largest. */
const kernelBuffers = ['tcp_wmem', 'tcp_rmem'].reduce((n, f) => n + Number(readFileSync(`/proc/sys/net/ipv4/${f}`, 'utf8').trim().split(/\s+/)[2]), 0);

let site: Made;
let app: Made;
const figures: string[] = [];

test.before(async () => {
  d = await startTestDaemon({ publicIp: '127.0.0.1', hosting: { anonServersPerIp: 5, rateLimit: { createsPerIpPerHour: 1000 } } });
  const meter = d.daemon.billing.meter;
  const add = meter.addEgress.bind(meter);
  meter.addEgress = (id: string, n: number) => {
    billed.set(id, billedOf(id) + n);
    add(id, n);
  };
  site = await create();
  // sparse files: the reads cost no disk
  const w = await sh(d.daemon.runtime, site.id, 'mkdir -p /root/www && truncate -s 1G /root/www/huge.bin && truncate -s 100M /root/www/big.bin');
  assert.is(w.code, 0, w.err);
  app = await create();
  const a = await sh(
    d.daemon.runtime,
    app.id,
    `cat > /root/app.py && printf '#!/bin/bash\\nexec python3 /root/app.py\\n' > /root/run.sh && chmod +x /root/run.sh`,
    APP_PY,
  );
  assert.is(a.code, 0, a.err);
});

test.after(async () => {
  if (figures.length) console.log(`\n   bytes billed vs bytes sent:\n   ${figures.join('\n   ')}`);
  await d?.stop();
});

test('five curl -I of a 1 GiB static file bill their heads only (bytes, not GB), over HTTP/1.1 and HTTP/2', async () => {
  const acc = d.daemon.store.servers.get(site.id)!.accountId;
  const t0 = Date.now() + 10 * 60_000;
  await d.daemon.billing.tick(t0); // a cursor for every server, so the next pass charges
  const ledgerBefore = d.daemon.store.billing.usageOf(acc).egressGb;
  const before = billedOf(site.id);
  let heads = 0;
  for (const how of ['h1', 'h2'] as const) {
    for (let i = 0; i < 5; i++) {
      const r = await curl(site, '/huge.bin', how, ['-I']);
      assert.is(r.code, 0, r.err);
      heads += how === 'h1' ? r.head : 0;
    }
  }
  const n = (await settled(site.id)) - before;
  // HTTP/1.1: exactly the head bytes curl received; HTTP/2: no DATA (its compressed HEADERS are not counted)
  assert.is(n, heads, `billed ${n} B for heads of ${heads} B`);
  await d.daemon.billing.tick(t0 + 10 * 60_000);
  const ledger = (d.daemon.store.billing.usageOf(acc).egressGb - ledgerBefore) * GB;
  assert.ok(ledger >= heads - 2 && ledger < heads + 4096, `the ledger charged ${ledger} B of egress`);
  figures.push(`HEAD ×10 of a 1 GiB file (5 HTTP/1.1, 5 HTTP/2): sent ${heads} B of heads, billed ${n} B, ledger ${Math.round(ledger)} B`);
});

test('an aborted 100 MB static download bills what was sent: not 0 and not 100 MB (HTTP/1.1 and HTTP/2)', async () => {
  for (const how of ['h1', 'h2'] as const) {
    const before = billedOf(site.id);
    const r = await curl(site, '/big.bin', how, [], 10 * MB);
    assert.is(r.code, 23, `curl stopped by its failed write: ${r.err}`);
    const n = (await settled(site.id)) - before;
    const got = r.body + (how === 'h1' ? r.head : 0);
    assert.ok(got >= 10 * MB && got < 60 * MB, `curl received ${got} B`);
    // What reached curl was sent. So was what the kernels still held when it left (curl's receive
    // buffer has crossed the wire), and over HTTP/2 what curl had taken into its stream window.
    assert.ok(n >= got, `${how}: billed ${n} B < received ${got} B`);
    const inFlight = kernelBuffers + (how === 'h2' ? 32 * 1024 * 1024 : 0);
    assert.ok(n <= got + inFlight && n < 90 * MB, `${how}: billed ${n} B for ${got} B received`);
    figures.push(`aborted 100 MB download (${how}): curl received ${got} B, billed ${n} B (+${((n - got) / MB).toFixed(2)} MB in flight)`);
  }
});

test('a full static download bills its bytes exactly (head and body over HTTP/1.1, DATA over HTTP/2)', async () => {
  for (const how of ['h1', 'h2'] as const) {
    const before = billedOf(site.id);
    const r = await curl(site, '/big.bin', how);
    assert.is(r.code, 0, r.err);
    assert.is(r.body, 100 * 1024 * 1024);
    const n = (await settled(site.id)) - before;
    const sent = r.body + (how === 'h1' ? r.head : 0);
    assert.is(n, sent, `${how}: billed ${n} B for ${sent} B`);
    figures.push(`full 100 MiB download (${how}): received ${sent} B, billed ${n} B`);
  }
});

/** Reads a slow answer; once `mid` bytes arrived, waits (while it still flows) until that much is billed. */
async function billedWhileFlowing(
  id: string,
  open: (onData: (n: number) => void) => Promise<void>,
  total: number,
  mid: number,
): Promise<{ got: number; midBilled: number }> {
  const before = billedOf(id);
  let got = 0;
  let midBilled = -1;
  let watching: Promise<void> | undefined;
  await open((n) => {
    got += n;
    if (got >= mid && !watching) {
      watching = until('egress billed while the answer flows', () => billedOf(id) - before >= mid, 5000).then(() => {
        midBilled = billedOf(id) - before;
        assert.ok(got < total, `billed only after the whole answer arrived (${got} of ${total} B)`);
      });
      watching.catch(() => {}); // awaited below; not an unhandled rejection meanwhile
    }
  });
  await watching;
  return { got, midBilled };
}

test('a slow answer proxied from an app is billed while it flows, and by the bytes written (HTTP/1.1 and HTTP/2)', async () => {
  const path = '/slow/100/60000/80'; // 6 MB over 8 s
  const total = 100 * 60000;
  await until('the app answers', async () => (await get(d.http, `${app.slug}.localhost`, '/slow/1/5/0')).status === 200, 30_000);
  await settled(app.id);
  // HTTP/1.1
  let before = billedOf(app.id);
  const h1 = await billedWhileFlowing(
    app.id,
    (onData) =>
      new Promise((resolve, reject) => {
        void import('node:http').then(({ request }) => {
          const q = request({ host: '127.0.0.1', port: d.http, path, headers: { host: `${app.slug}.localhost` }, agent: false }, (res) => {
            res.on('data', (c: Buffer) => onData(c.length));
            res.on('end', resolve);
            res.on('error', reject);
          });
          q.on('error', reject);
          q.end();
        });
      }),
    total,
    1 * MB,
  );
  assert.is(h1.got, total);
  let n = (await settled(app.id)) - before;
  assert.ok(n > total && n < total + 1024, `HTTP/1.1: billed ${n} B for a ${total} B body and its head`);
  figures.push(`proxied 6 MB slow answer (h1): body ${total} B, billed ${h1.midBilled} B while flowing, ${n} B in all`);
  // HTTP/2
  before = billedOf(app.id);
  const h2 = await billedWhileFlowing(
    app.id,
    (onData) =>
      new Promise((resolve, reject) => {
        const s = h2connect(`https://${app.slug}.localhost:${d.https}`, {
          ca: readFileSync(join(d.dataDir, 'tls', 'ca.pem')),
          lookup: (_h, o, cb) => (cb as any)(null, o.all ? [{ address: '127.0.0.1', family: 4 }] : '127.0.0.1', 4),
        });
        s.on('error', reject);
        const q = s.request({ ':path': path });
        q.on('data', (c: Buffer) => onData(c.length));
        q.on('end', () => (s.close(), resolve()));
        q.on('error', reject);
        q.end();
      }),
    total,
    1 * MB,
  );
  assert.is(h2.got, total);
  n = (await settled(app.id)) - before;
  assert.is(n, total, `HTTP/2: billed ${n} B of DATA for a ${total} B body`);
  figures.push(`proxied 6 MB slow answer (h2): body ${total} B, billed ${h2.midBilled} B while flowing, ${n} B in all`);
});

test('a WebSocket message stream from an app is billed while it is open, by the frames written', async () => {
  const count = 100;
  const size = 60000; // one 4-byte frame header each (126 form)
  const before = billedOf(app.id);
  const ws = new WebSocket(`ws://127.0.0.1:${d.http}/`, { headers: { host: `${app.slug}.localhost` } });
  await new Promise((r, j) => (ws.once('open', r), ws.once('error', j)));
  let got = 0;
  let frames = 0;
  const done = new Promise<void>((resolve) =>
    ws.on('message', (m: Buffer) => {
      got += m.length;
      if (++frames === count) resolve();
    }),
  );
  ws.send(`${count} ${size} 80`);
  await until('1 MB of messages', () => got >= 1 * MB, 20_000);
  await until('the stream billed while open', () => billedOf(app.id) - before >= 1 * MB, 5000);
  const midBilled = billedOf(app.id) - before;
  assert.ok(frames < count && ws.readyState === WebSocket.OPEN, 'billed while the WebSocket is open');
  await done;
  ws.terminate();
  const n = (await settled(app.id)) - before;
  const wire = count * (size + 4);
  assert.ok(n > wire && n < wire + 1024, `billed ${n} B for ${wire} B of frames and the 101 head`);
  figures.push(`WebSocket, 100 × 60 kB messages: ${wire} B of frames, billed ${midBilled} B while open, ${n} B in all`);
});

test.run();
