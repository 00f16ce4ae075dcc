// Builds the LLM port from the llm config slice; undefined when no base URL is configured.

import { OpenAiLlm } from './openai.js';
import type { Llm } from './types.js';

export function createLlm(c: { baseUrl?: string; apiKey?: string; concurrency: number }): Llm | undefined {
  return c.baseUrl ? new OpenAiLlm({ baseUrl: c.baseUrl, apiKey: c.apiKey, concurrency: c.concurrency }) : undefined;
}
