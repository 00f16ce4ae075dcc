// The LLM port over the openai SDK against any OpenAI-compatible base URL (OpenAI, vLLM,
// Ollama, llama.cpp server): chat.completions with response_format json_schema (strict). The
// SDK's own retries are off; the caller decides about retries and deadlines. A global limiter
// caps requests in flight. Requests go through the lean fetch (src/net: node:http, kept-alive). The
// caller's deadline becomes the SDK's per-request timeout (no AbortSignal: see ChatRequest).
// The SDK is loaded by the first request, not with the daemon (a tenth of a daemon start's CPU).

import type OpenAI from 'openai';
import { leanFetch } from '../net/index.js';
import { Limiter, LimiterTimeout } from './limiter.js';
import { LlmError, type ChatRequest, type Llm } from './types.js';

export interface OpenAiLlmOptions {
  baseUrl: string;
  apiKey?: string;
  concurrency: number;
}

let sdk: Promise<typeof OpenAI> | undefined;
const loadSdk = (): Promise<typeof OpenAI> => (sdk ??= import('openai').then((m) => m.default));

export class OpenAiLlm implements Llm {
  private client: OpenAI | undefined;
  private readonly limiter: Limiter;

  constructor(private readonly opts: OpenAiLlmOptions) {
    this.limiter = new Limiter(opts.concurrency);
  }

  async chat(req: ChatRequest): Promise<string> {
    try {
      return await this.limiter.run(req.deadline, () => this.send(req));
    } catch (e) {
      throw e instanceof LimiterTimeout ? late() : e;
    }
  }

  private async send(req: ChatRequest): Promise<string> {
    const OpenAI = await loadSdk();
    // Local servers (Ollama, llama.cpp) need no key, but the SDK insists on one.
    const client = (this.client ??= new OpenAI({
      baseURL: this.opts.baseUrl,
      apiKey: this.opts.apiKey || 'none',
      maxRetries: 0,
      timeout: 10 * 60_000,
      fetch: leanFetch,
    }));
    const timeout = Math.ceil(req.deadline - performance.now());
    if (timeout <= 0) throw late();
    let completion;
    try {
      completion = await client.chat.completions.create(
        {
          model: req.model,
          temperature: req.temperature,
          max_tokens: req.maxTokens,
          messages: [
            { role: 'system', content: req.system },
            { role: 'user', content: req.user },
          ],
          response_format: { type: 'json_schema', json_schema: { name: req.format.name, strict: true, schema: req.format.schema } },
        },
        { timeout },
      );
    } catch (e) {
      if (e instanceof OpenAI.APIConnectionTimeoutError || performance.now() >= req.deadline) throw late();
      const status = e instanceof OpenAI.APIError ? e.status : undefined;
      throw new LlmError('provider', `provider error${status ? ` ${status}` : ''}: ${String((e as Error).message).slice(0, 200)}`, status);
    }
    const content = completion?.choices?.[0]?.message?.content;
    if (typeof content !== 'string' || !content.trim()) throw new LlmError('empty', 'the model returned no content');
    return content;
  }
}

const late = () => new LlmError('timeout', 'the model did not answer in time');
