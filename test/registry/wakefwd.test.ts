// Waking through another host (issue 29): two daemons with real runc containers sharing a real
// PostgreSQL registry. A server of A whose app is asleep (stopped by A's idle timeout, as the
// daemon does it: no process of the app left) is requested 50 times at once through B's edge —
// over HTTP/1.1, then over a mix of HTTP/1.1 (the edge's lane) and HTTP/2 streams — and A starts
// it exactly once while every request gets the app's answer byte for byte.
// Starts are counted twice, independently: by the app itself (run.sh appends a line to
// /root/starts.log inside the container each time it is started, whoever starts it) and by A's
// log ('server woke', one per Runtime.start the wake made).

import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';
import { sh } from '../runtime/helpers/env.js';
import { get, getH2, type Got } from './fixtures/clients.js';
import { api, startClusterRegistry, startHost } from './fixtures/twohosts.js';

const IDLE = 3000;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;

/** A random word in the app's command line: its processes are found by it in /proc. */
const TOKEN = `wakefwd${randomBytes(6).toString('hex')}`;
const BLOB = randomBytes(150_000);
/** A threaded HTTP/1.1 server on :80 answering every request with its path, a newline and /root/blob. */
const APP_PY = `import socket, sys, threading
BLOB = open("/root/blob", "rb").read()
def handle(c):
    try:
        buf = b""
        while b"\\r\\n\\r\\n" not in buf:
            d = c.recv(65536)
            if not d: return
            buf += d
        body = buf.split(b" ", 2)[1] + b"\\n" + BLOB
        c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/octet-stream\\r\\nConnection: close\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80))
s.listen(256)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`;
const RUN_SH = `#!/bin/bash\necho "started $(date +%s%N)" >> /root/starts.log\nexec python3 /root/app.py ${TOKEN}\n`;
const expected = (path: string) => Buffer.concat([Buffer.from(`${path}\n`), BLOB]);

let srv: { id: string; slug: string; host: string };
/** The app's starts before the first wake of these tests. */
let startsBefore = 0;

/** Processes on this machine running the app (its command line names TOKEN). */
function appProcesses(): number {
  let n = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(TOKEN)) n++;
    } catch {
      // gone meanwhile
    }
  }
  return n;
}

/** Starts of the app as the app recorded them (its disk stays mounted on A while it sleeps). */
const appStarts = () =>
  readFileSync(`${a.daemon.runtime.get(srv.id)!.rootfs}/root/starts.log`, 'utf8')
    .split('\n')
    .filter(Boolean).length;
/** Starts A's wakes made, from its log. */
const wokeLogged = () => a.logs.filter((l) => l.msg === 'server woke' && l.server === srv.id).length;

/** Waits until A has put the server to sleep by itself (idle timeout): state sleeping, no process of the app left. */
async function asleep(): Promise<void> {
  await until('A puts the server to sleep', () => a.daemon.runtime.get(srv.id)?.state === 'sleeping', IDLE + 20_000, 50);
  await until('no process of the app is left', () => appProcesses() === 0, 5000, 50);
  assert.is(a.daemon.presence.state(srv.id), 'sleeping');
}

function assertAnswers(got: Got[], paths: string[]): void {
  assert.is(got.length, paths.length);
  got.forEach((r, i) => {
    assert.is(r.status, 200, `${paths[i]}: ${r.status} ${r.body.subarray(0, 200).toString()}`);
    assert.ok(r.body.equals(expected(paths[i])), `${paths[i]}: the app's answer byte for byte (${r.body.length} bytes)`);
  });
}

test.before(async () => {
  pg = await startClusterRegistry();
  const proxy = { idleTimeout: IDLE, idleCheckInterval: 200, wakeTimeout: '20s' };
  a = await startHost(pg, 'host-a', { proxy });
  b = await startHost(pg, 'host-b', { proxy });
  const slug = `wf${randomBytes(3).toString('hex')}`;
  const r = await api(a, 'POST', '/create', { body: { subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  srv = { id: r.json.id, slug, host: `${slug}.localhost` };
  const w = await sh(
    a.daemon.runtime,
    srv.id,
    `cat > /root/blob && cat > /root/app.py <<'EOF'\n${APP_PY}EOF\ncat > /root/run.sh <<'EOF'\n${RUN_SH}EOF\nchmod +x /root/run.sh`,
    BLOB,
  );
  assert.is(w.code, 0, w.err);
  // the app answers on A (its supervisor starts run.sh once it appears), then through B
  await until('the app answers on A', async () => ((await get(a, srv.host, '/up')).body.equals(expected('/up')) ? true : undefined), 30_000, 100);
  const viaB = await get(b, srv.host, '/up-b');
  assertAnswers([viaB], ['/up-b']);
  assert.is(b.daemon.runtime.get(srv.id), undefined, 'the server runs on A only');
});

test.after(async () => {
  await b?.stop();
  await a?.stop();
  await pg?.stop();
});

test('a sleeping server of A requested 50 times at once through B wakes once, and all 50 get the answer byte for byte', async () => {
  await asleep();
  const starts = (startsBefore = appStarts());
  const woke = wokeLogged();
  const paths = Array.from({ length: 50 }, (_, i) => `/crowd-${i}`);
  const got = await Promise.all(paths.map((p) => get(b, srv.host, p)));
  assertAnswers(got, paths);
  assert.is(appStarts() - starts, 1, 'the app was started once');
  assert.is(wokeLogged() - woke, 1, "A's log: one wake");
  assert.is(appProcesses(), 1, 'one app process runs');
  assert.is(a.daemon.runtime.get(srv.id)?.state, 'running');
  assert.is(b.daemon.runtime.get(srv.id), undefined);
});

test('the same with HTTP/1.1 (the lane, plain and TLS) and HTTP/2 streams mixed: one wake, 50 exact answers', async () => {
  await asleep();
  const starts = appStarts();
  const woke = wokeLogged();
  const lane = Array.from({ length: 20 }, (_, i) => `/lane-${i}`);
  const tls = Array.from({ length: 5 }, (_, i) => `/tls-${i}`);
  const h2 = Array.from({ length: 5 }, (_, s) => Array.from({ length: 5 }, (_, i) => `/h2-${s}-${i}`));
  const [laneGot, tlsGot, h2Got] = await Promise.all([
    Promise.all(lane.map((p) => get(b, srv.host, p))),
    Promise.all(tls.map((p) => get(b, srv.host, p, { tls: true }))),
    Promise.all(h2.map((ps) => getH2(b, srv.host, ps))),
  ]);
  assertAnswers(laneGot, lane);
  assertAnswers(tlsGot, tls);
  h2Got.forEach((g, s) => {
    assertAnswers(g, h2[s]);
    g.forEach((r) => assert.ok(r.headers[':status'] !== undefined, 'answered over HTTP/2'));
  });
  assert.is(appStarts() - starts, 1, 'the app was started once');
  assert.is(wokeLogged() - woke, 1, "A's log: one wake");
  assert.is(appProcesses(), 1, 'one app process runs');
  assert.is(appStarts() - startsBefore, 2, "the app's count saw both wakes' starts");
});

test("requested at once through A's own edge and through B's: still one wake, every answer exact", async () => {
  await asleep();
  const starts = appStarts();
  const woke = wokeLogged();
  const paths = Array.from({ length: 50 }, (_, i) => `/both-${i}`);
  const got = await Promise.all(paths.map((p, i) => (i % 2 ? get(a, srv.host, p) : get(b, srv.host, p, { tls: i % 4 === 0 }))));
  assertAnswers(got, paths);
  assert.is(appStarts() - starts, 1, 'the app was started once');
  assert.is(wokeLogged() - woke, 1, "A's log: one wake");
  assert.is(appProcesses(), 1, 'one app process runs');
});

test.run();
