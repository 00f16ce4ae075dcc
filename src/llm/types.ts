// The LLM port: one chat completion with a JSON-schema structured output. Verify builds the
// prompts and reads the answer; this port only carries them to a provider.

export interface JsonSchemaFormat {
  name: string;
  schema: Record<string, unknown>;
}

export interface ChatRequest {
  model: string;
  system: string;
  user: string;
  temperature: number;
  maxTokens: number;
  format: JsonSchemaFormat;
  /** performance.now() by which the answer must be in: the request (or its wait for a slot) is
   *  abandoned then and the call throws LlmError `timeout`. A time, not an AbortSignal: the openai
   *  SDK composes a caller's signal with its own for every request (AbortSignal.any) where a
   *  timeout is one timer; a paid quick call (three passes) answered 0.4–1.8 ms sooner at p50 in
   *  bench/verify without it. */
  deadline: number;
}

export interface Llm {
  /** Resolves with the message content (expected to be JSON per `format`); throws LlmError. */
  chat(req: ChatRequest): Promise<string>;
}

export type LlmFailure = 'provider' | 'timeout' | 'empty';

export class LlmError extends Error {
  constructor(
    readonly failure: LlmFailure,
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = 'LlmError';
  }
}
