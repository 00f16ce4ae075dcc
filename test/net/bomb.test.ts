// Compression bombs from the outside services on the paid path: a small gzip or brotli answer that
// expands to a gigabyte, served as the LLM provider's answer, the facilitator's and the RPC node's.
// Each client fails with its usual upstream error (LlmError provider, FacilitatorError / settle
// unknown, RpcUnreachable), and the event loop keeps serving: another HTTP server in the same
// process answers promptly while the bomb is being decoded.

import { createServer, type Server } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { LlmError, OpenAiLlm } from '../../src/llm/index.js';
import { DecodedTooLarge, leanFetch, MAX_DECODED_BYTES } from '../../src/net/index.js';
import { FacilitatorError, HttpFacilitator, RpcChain, RpcUnreachable } from '../../src/payments/index.js';

// 1 GiB of zeros as 1024 gzip members of 1 MiB each (a multi-member gzip stream decodes as one): about 1 MB on the wire
const GZIP_BOMB = Buffer.concat(Array(1024).fill(gzipSync(Buffer.alloc(1 << 20))));
// 256 MiB of zeros in brotli: about 50 KB on the wire
const BROTLI_BOMB = brotliCompressSync(Buffer.alloc(256 << 20), { params: { [constants.BROTLI_PARAM_QUALITY]: 1 } });

async function listen(s: Server): Promise<string> {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as { port: number }).port}`;
}
const close = (s: Server) => new Promise<void>((r) => (s.closeAllConnections(), s.close(() => r())));

/** A server answering every request with the bomb in `encoding` (JSON content type, as each service would). */
async function bombServer(encoding: 'gzip' | 'br') {
  const body = encoding === 'gzip' ? GZIP_BOMB : BROTLI_BOMB;
  const s = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': encoding, 'content-length': body.length }).end(body));
  });
  return { url: await listen(s), close: () => close(s) };
}

/** Runs `during` while pinging another local server (the daemon's /healthz stand-in) every 5 ms;
 *  returns the slowest ping and the longest event-loop stall in ms, and how many pings were
 *  answered while `during` ran. (Back to back, thousands of pings cost more CPU than the decoding
 *  they watch; a stall of the loop delays the ping in flight and the next timer alike.) */
async function pinging<T>(during: () => Promise<T>): Promise<{ outcome: PromiseSettledResult<T>; slowest: number; stall: number; pings: number }> {
  const h = monitorEventLoopDelay({ resolution: 10 });
  const s = createServer((_q, res) => res.end('ok'));
  const url = await listen(s);
  let running = true;
  let slowest = 0;
  let pings = 0;
  const loop = (async () => {
    while (running) {
      const t = performance.now();
      await (await leanFetch(`${url}/healthz`)).text();
      if (!running) break;
      const ms = performance.now() - t;
      slowest = Math.max(slowest, ms);
      pings++;
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  h.enable();
  const [outcome] = await Promise.allSettled([during()]);
  h.disable();
  running = false;
  await loop;
  await close(s);
  return { outcome, slowest, stall: h.max / 1e6, pings };
}

for (const encoding of ['gzip', 'br'] as const) {
  test(`a ${encoding} bomb fails the lean fetch with DecodedTooLarge, decoded off the event loop`, async () => {
    const b = await bombServer(encoding);
    try {
      const r = await pinging(() => leanFetch(`${b.url}/v1/chat/completions`, { method: 'POST', body: '{}' }));
      assert.is(r.outcome.status, 'rejected');
      const e = (r.outcome as PromiseRejectedResult).reason as TypeError;
      assert.is(e.message, 'fetch failed');
      assert.instance(e.cause, DecodedTooLarge);
      assert.match((e.cause as Error).message, String(MAX_DECODED_BYTES));
      assert.ok(r.pings > 0, 'pings were answered while the bomb was decoded');
      // a synchronous decode of the bomb blocks the loop for a second or more; the bound is generous for a machine shared with other test runs
      assert.ok(r.slowest < 500 && r.stall < 500, `slowest ping ${r.slowest.toFixed(1)} ms, longest stall ${r.stall.toFixed(1)} ms`);
      console.log(
        `  ${encoding} bomb: ${r.pings} pings answered meanwhile, slowest ${r.slowest.toFixed(1)} ms, longest event-loop stall ${r.stall.toFixed(1)} ms`,
      );
    } finally {
      await b.close();
    }
  });
}

test('the LLM client turns a bomb into its usual provider error', async () => {
  const b = await bombServer('gzip');
  try {
    const llm = new OpenAiLlm({ baseUrl: `${b.url}/v1`, concurrency: 2 });
    const r = await pinging(() =>
      llm.chat({
        model: 'm',
        temperature: 0,
        maxTokens: 10,
        system: 's',
        user: 'u',
        format: { name: 'f', schema: { type: 'object' } },
        deadline: performance.now() + 30_000,
      }),
    );
    assert.is(r.outcome.status, 'rejected');
    const e = (r.outcome as PromiseRejectedResult).reason as LlmError;
    assert.instance(e, LlmError);
    assert.is(e.failure, 'provider');
    // the request failed (no body reached the SDK), rather than a gigabyte of body failing to parse
    assert.is(e.message, 'provider error: Connection error.');
    assert.ok(r.slowest < 500 && r.stall < 500, `slowest ping ${r.slowest.toFixed(1)} ms, longest stall ${r.stall.toFixed(1)} ms`);
  } finally {
    await b.close();
  }
});

test('the facilitator client turns a bomb into FacilitatorError (verify) and an unknown settlement (settle)', async () => {
  const b = await bombServer('br');
  try {
    const fac = new HttpFacilitator({ url: b.url, timeoutMs: 30_000, settleTimeoutMs: 30_000 });
    const payload = { x402Version: 2 } as never;
    const r = await pinging(() => fac.verify(payload, {} as never));
    assert.is(r.outcome.status, 'rejected');
    const e = (r.outcome as PromiseRejectedResult).reason as Error;
    assert.instance(e, FacilitatorError);
    assert.match(e.message, 'expands beyond');
    const s = await fac.settle(payload, {} as never);
    assert.is(s.outcome, 'unknown');
    assert.match((s as { reason: string }).reason, 'expands beyond');
    assert.ok(r.slowest < 500 && r.stall < 500, `slowest ping ${r.slowest.toFixed(1)} ms, longest stall ${r.stall.toFixed(1)} ms`);
  } finally {
    await b.close();
  }
});

test('the JSON-RPC client turns a bomb into RpcUnreachable', async () => {
  const b = await bombServer('gzip');
  try {
    const chain = new RpcChain(b.url, '0x036CbD53842c5426634e7929541eC2318f3dCF7e', 30_000);
    const r = await pinging(() => chain.balanceOf('0x0000000000000000000000000000000000000001'));
    assert.is(r.outcome.status, 'rejected');
    const e = (r.outcome as PromiseRejectedResult).reason as Error;
    assert.instance(e, RpcUnreachable);
    assert.match(e.message, 'expands beyond');
    assert.ok(r.slowest < 500 && r.stall < 500, `slowest ping ${r.slowest.toFixed(1)} ms, longest stall ${r.stall.toFixed(1)} ms`);
  } finally {
    await b.close();
  }
});

test.run();
