// Exec over a WebSocket (the `ws` client) on a real daemon with a real runc server: output
// streamed as it comes while stdin is sent message by message (text and binary), the exit last;
// the socket closed mid-command kills the command (checked with ps through the HTTP exec); a bad
// first message and a wrong key are refused with the API's codes.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import WebSocket from 'ws';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
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

test('closing the socket mid-command kills the command', async () => {
  const c = await open();
  c.ws.send(JSON.stringify({ command: ['sh', '-c', 'echo started; exec sleep 777'] }));
  assert.equal(await c.next(), { stream: 'stdout', data: 'started\n' });
  const ps = async () =>
    (await send(d.http, 'api.localhost', 'POST', `/servers/${id}/exec`, { headers: { authorization: `Bearer ${key}` }, body: { command: 'ps -eo args=' } }))
      .json.stdout as string;
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
