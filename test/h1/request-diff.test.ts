// Differential test of the lane's request reader (src/h1/request.ts, what edge/lane.ts takes)
// against node's own HTTP server parser (llhttp, through a real node:http server with the edge's
// options, fed over an in-memory socket so that where a head ends is known to the byte; a last
// test shows a real loopback socket reads the same). Thousands of generated heads (request-gen.ts:
// seeded, the seed printed; ROOTBOX_H1_SEED replays one run), each read by both:
//  - a head the lane takes, node takes too: the same method, target and raw headers, ending at
//    the same byte (node's request comes with the last byte of the CRLFCRLF, not before);
//  - every shorter prefix of it the lane waits on (it would read the split head the same way);
//  - a head node refuses, the lane never takes, and hands on at once (node answers at once: the
//    lane does not wait for more bytes where node would not);
//  - while the lane waits for more bytes, node does too (no request, no refusal yet).

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { Duplex } from 'node:stream';
import { readRequest, type RequestRead } from '../../src/h1/index.js';
import { generate, rng } from './request-gen.js';

const HOST = 'app.rbx.test';
const CASES = 4000;

interface NodeRead {
  /** Requests node read, with the bytes pushed when each came. */
  requests: Array<{ method: string; url: string; raw: string[]; at: number }>;
  /** node's parser refused the bytes (its error code), and when. */
  error?: { code: string; at: number };
}

/** The edge's plain server options (src/edge/server.ts) on a server that only records. */
function nodeServer(): Server {
  const srv = createServer({ requestTimeout: 0, requireHostHeader: false, keepAliveTimeout: 5000 }, () => {});
  srv.on('clientError', (err: Error & { code?: string }, sock: Duplex & { readRecord?: NodeRead; pushed?: number }) => {
    sock.readRecord!.error ??= { code: err.code ?? err.message, at: sock.pushed ?? 0 };
    sock.destroy();
  });
  srv.on('request', (req: IncomingMessage, res) => {
    const sock = req.socket as unknown as { readRecord: NodeRead; pushed: number };
    sock.readRecord.requests.push({ method: req.method ?? '', url: req.url ?? '', raw: req.rawHeaders, at: sock.pushed });
    res.on('error', () => {});
  });
  return srv;
}

const server = nodeServer();

/** node's server fed `bytes`: up to `fineFrom` in one piece, then a byte at a time. */
async function nodeReads(bytes: Buffer, fineFrom: number): Promise<NodeRead> {
  const record: NodeRead = { requests: [] };
  const sock = new Duplex({ read() {}, write: (_c, _e, cb) => cb() }) as Duplex & { readRecord: NodeRead; pushed: number; remoteAddress: string };
  sock.readRecord = record;
  sock.pushed = 0;
  sock.remoteAddress = '127.0.0.1';
  sock.on('error', () => {});
  server.emit('connection', sock);
  // the server's data listener puts the socket in flowing mode on the next tick; from then on a push is read at once
  await new Promise((ok) => setImmediate(ok));
  const first = Math.max(0, Math.min(fineFrom, bytes.length));
  if (first > 0) {
    sock.pushed = first;
    sock.push(bytes.subarray(0, first));
  }
  for (let at = first; at < bytes.length && !record.error && !sock.destroyed; at++) {
    sock.pushed = at + 1;
    sock.push(bytes.subarray(at, at + 1));
    if (sock.readableLength > 0) throw new Error('the in-memory socket did not hand the bytes on at once');
  }
  sock.destroy();
  return record;
}

const esc = (b: Buffer) => JSON.stringify(b.toString('latin1')).replace(/[\x7f-\xff]/g, (c) => `\\x${c.charCodeAt(0).toString(16)}`);
const show = (x: RequestRead) => (x.kind === 'head' ? `head ${x.size} ${JSON.stringify(x.head)}` : x.kind);

/** One head read by both; returns why they disagree, or undefined. */
async function differ(bytes: Buffer): Promise<string | undefined> {
  const lane = readRequest(bytes);
  if (lane.kind === 'head') {
    const n = await nodeReads(bytes, lane.size - 4);
    const first = n.requests[0];
    if (!first) return `the lane takes a head node does not read (${n.error?.code ?? 'no request'}): ${show(lane)}`;
    if (first.at !== lane.size) return `node's head ends at ${first.at}, the lane's at ${lane.size}`;
    const want = { method: first.method, url: first.url, raw: first.raw };
    const got = { method: lane.head.method, url: lane.head.target, raw: lane.head.raw };
    if (JSON.stringify(want) !== JSON.stringify(got)) return `read differently:\n  node: ${JSON.stringify(want)}\n  lane: ${JSON.stringify(got)}`;
    // split at every byte: the lane waits on each shorter prefix, as node did
    for (let k = 1; k < lane.size; k++) {
      const p = readRequest(bytes.subarray(0, k));
      if (p.kind !== 'more') return `the prefix of ${k} bytes is ${show(p)}, not more`;
    }
    return undefined;
  }
  const n = await nodeReads(bytes, 0);
  if (lane.kind === 'more') {
    if (n.error) return `the lane waits for more where node refuses at once (${n.error.code} at byte ${n.error.at})`;
    if (n.requests.length) return `the lane waits for more where node read a request (${JSON.stringify(n.requests[0])})`;
  }
  return undefined;
}

test('heads that once read differently, or were waited on where node refuses at once', async () => {
  const cases = [
    `GET / HTTP/1.1\nHost: ${HOST}\n\n`,
    `GET / HTTP/1.1\r\nHost: ${HOST}\nX-A: 1\r\n\r\n`,
    `GET / HTTP/1.1\r\nHost: ${HOST}\rX-A: 1\r\n\r\n`,
    `GET / HTTP/1.1\r\nHost: ${HOST}\r\nX-A: a\x00b\r\n`,
    `GET /a b HTTP/1.1\r\n`,
    `GET / HTTP/1.1\r\nBad Name: x\r\n`,
    `GET / HTTP/1\r`,
    `GET / HTTP/1.1\r\nContent-Length: +`,
    `GET / HTTP/1.1\r\nHost: ${HOST}\r\nX-A:  v \t\r\nConnection: close\r\n\r\n`,
  ];
  for (const c of cases) {
    const bytes = Buffer.from(c, 'latin1');
    const why = await differ(bytes);
    assert.is(why, undefined, `${why}: ${esc(bytes)}`);
  }
});

test(`${CASES} generated request heads: the lane takes only what node reads the same way, and waits only where node waits`, async () => {
  const seed = Number(process.env.ROOTBOX_H1_SEED ?? Math.floor(Math.random() * 2 ** 31));
  console.log(`  request-diff seed ${seed} (ROOTBOX_H1_SEED=${seed} replays it)`);
  const r = rng(seed);
  const kinds = { head: 0, node: 0, more: 0 };
  for (let i = 0; i < CASES; i++) {
    const c = generate(r, HOST);
    const why = await differ(c.bytes);
    assert.is(why, undefined, `case ${i} of seed ${seed} [${c.shape.join(' ')}]: ${why}\n  bytes: ${esc(c.bytes).slice(0, 2000)}`);
    kinds[readRequest(c.bytes).kind]++;
  }
  // the generator exercises every outcome, most of all the heads the lane takes
  assert.ok(kinds.head > CASES / 3 && kinds.node > CASES / 20 && kinds.more > 0, JSON.stringify(kinds));
});

test("node's server reads a head over a real loopback socket as over the in-memory one", async () => {
  const srv = nodeServer();
  const seen: string[][] = [];
  srv.removeAllListeners('request');
  srv.on('request', (req: IncomingMessage, res) => {
    seen.push([req.method ?? '', req.url ?? '', ...req.rawHeaders]);
    res.end();
  });
  await new Promise<void>((ok) => srv.listen(0, '127.0.0.1', ok));
  try {
    const bytes = Buffer.from(`GET /a?b HTTP/1.1\r\nHost: ${HOST}\r\nX-A: \xe9 v\t \r\nConnection: close\r\n\r\n`, 'latin1');
    await new Promise<void>((ok) => {
      const s = connect((srv.address() as AddressInfo).port, '127.0.0.1', () => s.end(bytes));
      s.on('data', () => {});
      s.on('close', () => ok());
    });
    const inMemory = (await nodeReads(bytes, 0)).requests[0];
    const lane = readRequest(bytes);
    assert.equal(seen[0], [inMemory.method, inMemory.url, ...inMemory.raw]);
    assert.ok(lane.kind === 'head');
    assert.equal(seen[0], [lane.head.method, lane.head.target, ...lane.head.raw]);
  } finally {
    await new Promise((ok) => srv.close(ok));
  }
});

test.run();
