// Outside HTTP calls of the daemon's clients (LLM, JSON-RPC, facilitator): a lean fetch.
export { leanFetch, leanPost, MAX_ANSWER_BYTES } from './fetch.js';
