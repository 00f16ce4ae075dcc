// The error bodies every API answers with (errors.ts writes them: `{error, detail}`, plus the
// validation issues on a 400 and the request id on every 5xx) and the answers the Router itself
// can give on a route, by what the route declares: 400/413/415 where there is input, 405 and
// 500 everywhere. openapi.ts documents them on every route they apply to.

import { z } from 'zod';
import type { AnswerDoc, Answers, Route } from './route.js';

export const ErrorBody = z.object({
  error: z.string().describe('Stable error code, for programs to match on.'),
  detail: z.string().describe('What went wrong and what to do, for people.'),
  retry_after: z.number().int().min(1).optional().describe('When waiting helps (every 429): seconds until a retry may succeed, as in Retry-After.'),
});

export const BadRequestBody = ErrorBody.extend({
  issues: z
    .array(z.object({ path: z.string().describe('Dotted path of the field (empty for the whole input).'), message: z.string() }))
    .max(10)
    .optional()
    .describe('When the body, query or path did not match its schema: up to 10 problems, the first also in `detail`.'),
});

export const ServerErrorBody = ErrorBody.extend({
  request_id: z.string().describe('The id of the request (also the X-Request-Id header); quote it when reporting the failure.'),
});

/** Named error schemas, listed in every document's components.schemas. */
export const ERROR_SCHEMAS: Record<string, z.ZodType> = { Error: ErrorBody, BadRequest: BadRequestBody, ServerError: ServerErrorBody };

const HEADERS: Partial<Record<number, AnswerDoc['headers']>> = {
  401: { 'WWW-Authenticate': { description: 'The scheme to authenticate with (Bearer).', required: true } },
  405: { Allow: { description: 'The methods this path answers.', required: true } },
  429: { 'Retry-After': { description: 'Seconds to wait before trying again.', required: true } },
};

/** An answer given as a description only gets the standard error body of its status; standard
 *  headers (Allow, Retry-After, WWW-Authenticate) are added to answers of their status. */
export function normalize(status: number, a: AnswerDoc | string): AnswerDoc {
  const doc: AnswerDoc = typeof a === 'string' ? { description: a, json: status === 400 ? BadRequestBody : status >= 500 ? ServerErrorBody : ErrorBody } : a;
  const std = HEADERS[status];
  return std ? { ...doc, headers: { ...std, ...doc.headers } } : doc;
}

/** The router's own answers that read the same on every route, shared as components.responses. */
export const STANDARD: Record<string, [number, AnswerDoc]> = {
  InvalidInput: [400, normalize(400, 'The body, query or path does not match its schema (`issues` names each field), or the body is not JSON.')],
  UnsupportedMediaType: [
    415,
    normalize(415, 'The body is not JSON, and declares a content type other than application/json (a JSON body is taken whatever type it declares).'),
  ],
  MethodNotAllowed: [405, normalize(405, 'This path does not answer this method (see Allow).')],
  InternalError: [500, normalize(500, 'An internal error; the detail is a generic sentence and the failure is logged under request_id.')],
};
const std = (name: string) => ({ [STANDARD[name][0]]: STANDARD[name][1] });

/** Every answer of a route: its own first, then its steps', its authenticator's, the router's. */
export function answersOf(r: Route, auth?: Answers): Record<number, AnswerDoc> {
  const out: Record<number, AnswerDoc> = {};
  const add = (all: Answers | undefined) => {
    for (const [k, v] of Object.entries(all ?? {})) if (v !== undefined) out[Number(k)] ??= normalize(Number(k), v);
  };
  add(r.responses);
  for (const s of r.use ?? []) add(s.responses);
  if (r.auth !== 'none') add(auth);
  if (r.body || r.query) add(std('InvalidInput'));
  if (r.params) add({ 404: 'No such resource.' });
  if (r.body) add({ 413: `The body is larger than this route accepts (${r.bodyLimit ?? 64 * 1024} bytes).`, ...std('UnsupportedMediaType') });
  add({ ...std('MethodNotAllowed'), ...std('InternalError') });
  return out;
}
