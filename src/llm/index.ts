// Public surface of the LLM port.
export { OpenAiLlm, type OpenAiLlmOptions } from './openai.js';
export { createLlm } from './setup.js';
export { Limiter } from './limiter.js';
export { LlmError, type Llm, type ChatRequest, type JsonSchemaFormat, type LlmFailure } from './types.js';
