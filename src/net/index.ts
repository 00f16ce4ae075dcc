// Outside HTTP calls of the daemon's clients (LLM, JSON-RPC, facilitator): a lean fetch.
export { leanFetch, MAX_ANSWER_BYTES } from './fetch.js';
