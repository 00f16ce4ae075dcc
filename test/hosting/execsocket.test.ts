// Exec over a WebSocket (the `ws` client) on a real daemon with a real runc server: output
// streamed as it comes while stdin is sent message by message (text and binary), the exit last;
// stdin pushed at a command that does not read it pauses the socket (the daemon holds a small
// buffer: its own count, the process's buffers; a client leaving the paused socket still kills
// the command), and a command that reads gets every byte; the
// socket closed mid-command kills the command (checked with ps through the HTTP exec); a bad
// first message and a wrong key are refused with the API's codes.
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import WebSocket from 'ws';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { parseExposition, sampleValue } from '../helpers/prom.js';
import { until } from '../helpers/wait.js';
import { send } from '../http/contract.js';

let d: TestDaemon;
let id = '';
let key = '';

test.before(async () => {
  d = await startTestDaemon({ hosting: { rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000 } } });
  const created = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(created.status, 200, created.text);
  ({ id, api_key: key } = created.json);
});
test.after(async () => {
  await d?.stop();
});

type Msg = Record<string, any>;
function open(server = id, apiKey = key): Promise<{ ws: WebSocket; next(): Promise<Msg>; closed: Promise<number> }> {
  const ws = new WebSocket(`ws://127.0.0.1:${d.http}/servers/${server}/exec`, { headers: { host: 'api.localhost', authorization: `Bearer ${apiKey}` } });
  const queue: Msg[] = [];
  const waiting: ((m: Msg) => void)[] = [];
  ws.on('message', (m) => {
    const msg = JSON.parse(m.toString()) as Msg;
    const w = waiting.shift();
    if (w) w(msg);
    else queue.push(msg);
  });
  const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws, closed, next: () => (queue.length ? Promise.resolve(queue.shift()!) : new Promise((r) => waiting.push(r))) }));
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c));
      res.on('end', () => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode, body })));
    });
    ws.once('error', reject);
  });
}
/** Messages until the exit line, output joined per stream. */
async function rest(c: { next(): Promise<Msg> }): Promise<{ stdout: string; stderr: string; exit: Msg }> {
  let stdout = '';
  let stderr = '';
  for (;;) {
    const m = await c.next();
    if (m.stream === 'stdout') stdout += m.data;
    else if (m.stream === 'stderr') stderr += m.data;
    else return { stdout, stderr, exit: m };
  }
}

test('stdin and eof sent right behind the request, before the command runs, reach it in order', async () => {
  const c = await open();
  // one write: the three frames arrive together, while the command is still being started
  c.ws.send(JSON.stringify({ command: 'cat; echo " end"', timeout: 10 }));
  c.ws.send(JSON.stringify({ stdin: 'one ' }));
  c.ws.send(Buffer.from('two'));
  c.ws.send(JSON.stringify({ eof: true }));
  const r = await rest(c);
  assert.is(r.stdout, 'one two end\n');
  assert.equal([r.exit.exit_code, r.exit.timed_out], [0, false]);
  assert.is(await c.closed, 1000);
});

test('output streams while stdin is sent message by message; eof ends it and the exit comes last', async () => {
  const c = await open();
  c.ws.send(JSON.stringify({ command: 'while read l; do echo "got $l"; echo "err $l" >&2; done; echo bye', stdin: 'first\n' }));
  // the two streams are two pipes: their order between them is the kernel's, within each it is kept
  const early = [await c.next(), await c.next()];
  assert.equal(
    early.sort((x, y) => (x.stream < y.stream ? -1 : 1)),
    [
      { stream: 'stderr', data: 'err first\n' },
      { stream: 'stdout', data: 'got first\n' },
    ],
    'the output of the first line comes before any more input is sent',
  );
  c.ws.send(JSON.stringify({ stdin: 'second\n' }));
  c.ws.send(Buffer.from('third\n'));
  c.ws.send(JSON.stringify({ eof: true }));
  const r = await rest(c);
  assert.is(r.stdout, 'got second\ngot third\nbye\n');
  assert.is(r.stderr, 'err second\nerr third\n');
  assert.equal([r.exit.exit_code, r.exit.signal, r.exit.timed_out], [0, null, false]);
  assert.is(await c.closed, 1000);
});

/** The command lines of the server's processes (through the HTTP exec). */
const ps = async () =>
  (await send(d.http, 'api.localhost', 'POST', `/servers/${id}/exec`, { headers: { authorization: `Bearer ${key}` }, body: { command: 'ps -eo args=' } })).json
    .stdout as string;

const MiB = 1024 * 1024;
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
/** Bytes of buffers this process (the daemon and the client) holds after a full collection. */
const buffers = () => (gc(), process.memoryUsage().arrayBuffers);
/** What the daemon says it holds of exec stdin (its metric), or undefined where it has none. */
const heldStdin = () =>
  new Promise<number | undefined>((resolve, reject) => {
    request({ host: '127.0.0.1', port: d.daemon.metrics.port, path: '/metrics' }, (res) => {
      let b = '';
      res.on('data', (c: Buffer) => (b += c));
      res.on('end', () => {
        const f = parseExposition(b);
        resolve(f.has('rootbox_held_bytes') ? sampleValue(f, 'rootbox_held_bytes', { door: 'exec_stdin' }) : undefined);
      });
    })
      .on('error', reject)
      .end();
  });

test('stdin pushed at a command that does not read pauses the socket: the daemon holds a small buffer, not what was pushed', async () => {
  const c = await open();
  c.ws.send(JSON.stringify({ command: 'echo started; exec sleep 121', timeout: 200 }));
  assert.equal(await c.next(), { stream: 'stdout', data: 'started\n' });
  const before = buffers();
  const PUSH = 256 * MiB;
  const chunk = Buffer.alloc(MiB, 120);
  let pushed = 0;
  /** Bytes the client's socket took (sent, or in the kernel's buffers on the way). */
  const taken = () => pushed - c.ws.bufferedAmount;
  let last = -1;
  // the client keeps a few MiB queued while its socket takes them, until it takes no more
  await until(
    'the socket takes no more stdin, or all of it',
    () => {
      while (c.ws.bufferedAmount < 4 * MiB && pushed < PUSH) {
        c.ws.send(chunk);
        pushed += MiB;
      }
      const now = taken();
      const stuck = now === last;
      last = now;
      return stuck || now >= PUSH;
    },
    120_000,
    500,
  );
  assert.ok(taken() < 64 * MiB, `the socket took ${(taken() / MiB).toFixed(0)} MiB of stdin for a command that reads none`);
  const held = await heldStdin();
  assert.ok(held !== undefined && held <= 2 * MiB, `the daemon holds ${held} bytes of stdin`);
  const grew = buffers() - before;
  assert.ok(grew < 32 * MiB, `the buffers grew by ${(grew / MiB).toFixed(0)} MiB`);
  // the client leaves while its socket is paused: the command is still killed, its stdin let go
  c.ws.terminate();
  await until('the command is gone', async () => !(await ps()).includes('sleep 121'), 15_000, 200);
  await until('nothing held', async () => (await heldStdin()) === 0, 15_000, 200);
});

test('a command that reads its stdin gets every byte of a large one, pushed as fast as the socket takes it', async () => {
  const c = await open();
  c.ws.send(JSON.stringify({ command: 'sha256sum', timeout: 120 }));
  const data = randomBytes(48 * MiB);
  for (let at = 0; at < data.length; at += MiB) {
    c.ws.send(data.subarray(at, at + MiB));
    if (c.ws.bufferedAmount > 4 * MiB) await until('the socket takes more', () => c.ws.bufferedAmount <= 4 * MiB, 60_000, 10);
  }
  c.ws.send(JSON.stringify({ eof: true }));
  const r = await rest(c);
  assert.is(r.stdout.split(' ')[0], createHash('sha256').update(data).digest('hex'));
  assert.equal([r.exit.exit_code, r.exit.timed_out], [0, false]);
  assert.is(await c.closed, 1000);
});

test('closing the socket mid-command kills the command', async () => {
  const c = await open();
  c.ws.send(JSON.stringify({ command: ['sh', '-c', 'echo started; exec sleep 777'] }));
  assert.equal(await c.next(), { stream: 'stdout', data: 'started\n' });
  assert.ok((await ps()).includes('sleep 777'));
  c.ws.terminate();
  await until('the command is gone', async () => !(await ps()).includes('sleep 777'), 15_000, 200);
});

test('a first message that is not an exec request is refused with the API code and close 1008', async () => {
  const c = await open();
  c.ws.send(JSON.stringify({ command: '' }));
  const m = await c.next();
  assert.is(m.error, 'invalid_request');
  assert.type(m.detail, 'string');
  assert.is(await c.closed, 1008);
});

test('a wrong key or another account’s server is refused before the upgrade', async () => {
  const wrong = await open(id, 'rbx_' + 'z'.repeat(32)).then(
    () => undefined,
    (e: { status?: number; body?: string }) => e,
  );
  assert.is(wrong?.status, 401);
  assert.is(JSON.parse(wrong!.body!).error, 'invalid_api_key');
  const other = await send(d.http, 'api.localhost', 'POST', '/create');
  const notMine = await open(id, other.json.api_key).then(
    () => undefined,
    (e: { status?: number; body?: string }) => e,
  );
  assert.is(notMine?.status, 404);
  assert.is(JSON.parse(notMine!.body!).error, 'server_not_found');
});

test.run();
