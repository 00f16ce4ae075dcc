// Outside HTTP calls of the daemon's clients (LLM, JSON-RPC, facilitator): a lean fetch.
export { leanFetch, leanPost, MAX_ANSWER_BYTES, MAX_DECODED_BYTES, DecodedTooLarge } from './fetch.js';
