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
  signal: AbortSignal;
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
