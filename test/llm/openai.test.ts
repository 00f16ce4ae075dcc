// The LLM port over the openai SDK against a real local OpenAI-compatible server: a call gives the
// SDK a timeout, not an AbortSignal (which the SDK composes with its own per request through
// AbortSignal.any), and its answer is read from the bytes the lean fetch kept; the caller's deadline
// cuts off a provider that does not answer, and a call still queued behind the concurrency cap at
// its deadline is never sent.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { LlmError, OpenAiLlm, type ChatRequest } from '../../src/llm/index.js';
import { BufferedResponse } from '../../src/net/response.js';

const ANSWER = {
  id: 'x',
  object: 'chat.completion',
  created: 0,
  model: 'm',
  choices: [{ index: 0, message: { role: 'assistant', content: '{"verdict":"pass","reasoning":"ok"}' }, finish_reason: 'stop' }],
};

/** hang: requests left unanswered (each one's close is counted). */
let hang = false;
let received = 0;
let closedUnanswered = 0;
const waiting: ServerResponse[] = [];
const server = createServer((req: IncomingMessage, res: ServerResponse) => {
  received++;
  req.resume();
  req.on('end', () => {
    if (!hang) return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(ANSWER));
    waiting.push(res);
    res.on('close', () => res.writableEnded || closedUnanswered++);
  });
});
let url = '';

test.before(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}/v1`;
});
test.after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});
test.before.each(() => {
  hang = false;
  received = 0;
  closedUnanswered = 0;
});

const ask = (llm: OpenAiLlm, inMs: number): Promise<string> => {
  const req: ChatRequest = {
    model: 'm',
    temperature: 0,
    maxTokens: 10,
    system: 's',
    user: 'u',
    format: { name: 'f', schema: { type: 'object' } },
    deadline: performance.now() + inMs,
  };
  return llm.chat(req);
};

async function timeout(p: Promise<unknown>): Promise<number> {
  const t = performance.now();
  try {
    await p;
  } catch (e) {
    assert.instance(e, LlmError);
    assert.is((e as LlmError).failure, 'timeout');
    return performance.now() - t;
  }
  throw new Error('expected a timeout');
}

test('a call ties no signal to its request: no AbortSignal.any, no body stream', async () => {
  const any = AbortSignal.any;
  const getter = Object.getOwnPropertyDescriptor(BufferedResponse.prototype, 'body')!;
  let composed = 0;
  let streams = 0;
  AbortSignal.any = (signals) => (composed++, any.call(AbortSignal, signals));
  Object.defineProperty(BufferedResponse.prototype, 'body', {
    configurable: true,
    get(this: BufferedResponse) {
      streams++;
      return getter.get!.call(this);
    },
  });
  try {
    const llm = new OpenAiLlm({ baseUrl: url, concurrency: 4 });
    for (let i = 0; i < 3; i++) assert.is(await ask(llm, 10_000), ANSWER.choices[0].message.content);
    assert.is(received, 3);
    // given an AbortSignal, the SDK composed it with its own for every request (AbortSignal.any)
    assert.is(composed, 0);
    assert.is(streams, 0);
  } finally {
    AbortSignal.any = any;
    Object.defineProperty(BufferedResponse.prototype, 'body', getter);
  }
});

test('the deadline cuts off a provider that does not answer, and closes its request', async () => {
  hang = true;
  const llm = new OpenAiLlm({ baseUrl: url, concurrency: 4 });
  const took = await timeout(ask(llm, 300));
  assert.ok(took >= 250 && took < 3000, `timed out after ${took.toFixed(0)} ms`);
  await new Promise((r) => setTimeout(r, 50));
  assert.is(received, 1);
  assert.is(closedUnanswered, 1);
  assert.is(await timeout(ask(llm, 0)).then(() => received), 1, 'a call past its deadline is not sent');
});

test('a call queued behind the concurrency cap past its deadline is never sent; the slot serves the next', async () => {
  hang = true;
  const llm = new OpenAiLlm({ baseUrl: url, concurrency: 1 });
  const first = timeout(ask(llm, 1000));
  const queued = await timeout(ask(llm, 200));
  assert.ok(queued >= 150 && queued < 900, `the queued call timed out after ${queued.toFixed(0)} ms`);
  assert.is(received, 1);
  await first;
  hang = false;
  assert.is(await ask(llm, 10_000), ANSWER.choices[0].message.content);
  assert.is(received, 2);
});

test.run();
