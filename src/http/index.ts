// Public surface of the HTTP toolkit used by the APIs and the edge.
export { Router, newRequestId, type RequestObserver } from './router.js';
export { appErrorReply, errorReply, parserError, rawError, statusOf, type RawErrorOptions } from './errors.js';
export { sendReply, json, writeRaw } from './reply.js';
export { readBody, readJson } from './body.js';
export { validate } from './validate.js';
export { HANDLED, type Ctx, type Handler, type HandlerResult, type HttpApp, type Reply, type Req, type Res, type RequestInfo, type RouteOptions } from './types.js';
export { componentsOf, jsonBody, jsonResponse } from './openapi.js';
