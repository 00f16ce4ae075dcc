// Public surface of the HTTP toolkit used by the APIs and the edge.
export { Router, newRequestId, type Invocation, type RequestObserver, type RouterOptions } from './router.js';
export { appErrorReply, errorReply, parserError, rawError, statusOf, type RawErrorOptions } from './errors.js';
export { sendReply, json, writeRaw } from './reply.js';
export { readBody, readJson } from './body.js';
export { withBody, collectAnswer } from './inproc.js';
export { validate } from './validate.js';
export {
  HANDLED,
  type Ctx,
  type Handler,
  type HandlerResult,
  type HttpApp,
  type LaneApp,
  type HelloApp,
  type LaneExchange,
  type LaneOutcome,
  type LaneRequest,
  type Reply,
  type Req,
  type Res,
  type RequestInfo,
  type RouteOptions,
  type UpgradeApp,
} from './types.js';
export { apiMarkdown } from './apidoc.js';
export { documentOf, jsonSchemaOf, openApiDocument, type ApiInfo } from './openapi.js';
export { routes, type Answers, type AnswerDoc, type Auth, type Authenticator, type BaseCtx, type Route, type RouteCtx, type Step } from './route.js';
export { ErrorBody, BadRequestBody, ServerErrorBody } from './schemas.js';
