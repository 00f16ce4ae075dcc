// HTTP/1.1 on the wire, for the edge's lane and the proxy's upstream side: one grammar
// (grammar.ts), the request reader (request.ts), the response reader (response.ts) and the head
// writer (head.ts). It imports no other module of the daemon.

export { HOP, connectionTokens } from './grammar.js';
export { readHead, readRequest, MAX_REQUEST_HEAD, type RequestHead, type RequestRead } from './request.js';
export { ResponseReader, UpstreamProtocolError, type ReaderEvents, type ResponseHead } from './response.js';
export { HttpDate, REQUEST_DROP, SPOOFABLE, connectionNamed, passedFields, requestHead, responseHead, wholeAnswer, type AnswerHead } from './head.js';
