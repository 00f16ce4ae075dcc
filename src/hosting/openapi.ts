// /openapi.json of the hosting API: OpenAPI 3.1.0 whose schemas come from schemas.ts, the same
// zod schemas the handlers validate with.

import { componentsOf, jsonBody, jsonResponse as res } from '../http/index.js';
import { registry } from './schemas.js';

const errors = (...codes: number[]) =>
  Object.fromEntries(
    codes.map((c) => [
      String(c),
      res('Error', {
        400: 'Bad input', 401: 'Missing or invalid api_key', 402: 'Needs credit', 403: 'Limit reached', 404: 'Not found or not yours',
        409: 'Every wanted subdomain is taken', 429: 'Rate limited (see Retry-After)', 503: 'At capacity or not configured',
      }[c] ?? 'Error'),
    ]),
  );

export function hostingOpenApi(serverUrl?: string): Record<string, unknown> {
  const bearer = [{ bearer: [] }];
  const idParam = [{ name: 'id', in: 'path', required: true, schema: { type: 'string', pattern: '^srv_[0-9a-f]+$' } }];
  return {
    openapi: '3.1.0',
    info: { title: 'rootbox hosting API', version: '1.0.0', description: 'Root Linux servers on demand, each on its own HTTPS subdomain and reachable over SSH.' },
    ...(serverUrl ? { servers: [{ url: serverUrl }] } : {}),
    components: { schemas: componentsOf(registry), securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'api_key: rbx_ followed by 32 characters' } } },
    paths: {
      '/create': {
        post: {
          summary: 'Create a server (and an account when called without credential)',
          security: [{}, ...bearer],
          requestBody: jsonBody('CreateRequest', false),
          responses: {
            '200': {
              description: 'The server, or a verification_required answer in phone step 1',
              content: { 'application/json': { schema: { oneOf: [{ $ref: '#/components/schemas/CreateResponse' }, { $ref: '#/components/schemas/VerificationRequired' }] } } },
            },
            ...errors(400, 401, 402, 403, 409, 429, 503),
          },
        },
      },
      '/servers': { get: { summary: 'List your servers', security: bearer, responses: { '200': { description: 'Servers', content: { 'application/json': { schema: { type: 'object', properties: { servers: { type: 'array', items: { $ref: '#/components/schemas/Server' } } }, required: ['servers'] } } } }, ...errors(401, 402) } } },
      '/servers/{id}': {
        get: { summary: 'Read a server', security: bearer, parameters: idParam, responses: { '200': res('Server', 'The server'), ...errors(401, 402, 404) } },
        delete: { summary: 'Delete a server and free everything it held', security: bearer, parameters: idParam, responses: { '200': { description: 'Deleted', content: { 'application/json': { schema: { type: 'object', properties: { ok: { type: 'boolean' } } } } } }, ...errors(401, 404) } },
      },
      '/servers/{id}/restart': { post: { summary: 'Restart a server', security: bearer, parameters: idParam, responses: { '200': res('Server', 'The restarted server'), ...errors(401, 402, 404) } } },
      '/credits': { get: { summary: 'Your credits', security: bearer, responses: { '200': res('Credits', 'Credits'), ...errors(401, 402) } } },
      '/expose': {
        post: { summary: 'Publish a container TCP port on a public port', security: bearer, requestBody: jsonBody('ExposeRequest'), responses: { '200': res('ExposedPort', 'The public port'), ...errors(400, 401, 403, 404, 503) } },
        delete: { summary: 'Stop publishing a container TCP port', security: bearer, requestBody: jsonBody('ExposeRequest'), responses: { '200': { description: 'Released', content: { 'application/json': { schema: { type: 'object', properties: { ok: { type: 'boolean' } } } } } }, ...errors(400, 401, 404) } },
      },
      '/usage': { get: { summary: 'Your usage ledger, newest first', security: bearer, parameters: [{ name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 500 } }, { name: 'cursor', in: 'query', schema: { type: 'string' } }], responses: { '200': { description: 'A page of ledger entries and next_cursor', content: { 'application/json': { schema: { type: 'object', properties: { entries: { type: 'array', items: { type: 'object' } }, next_cursor: { type: ['string', 'null'] } } } } } }, ...errors(400, 401) } } },
      '/account/recharge': {
        get: { summary: 'How to add credit (HTML for browsers, JSON for agents)', security: bearer, responses: { '200': { description: 'Instructions and current credits', content: { 'application/json': { schema: { type: 'object' } }, 'text/html': { schema: { type: 'string' } } } }, ...errors(401) } },
        post: { summary: 'Add credit, paid with x402 for exactly the amount', security: bearer, requestBody: { required: true, content: { 'application/json': { schema: { type: 'object', properties: { usd: { type: 'number', minimum: 0.01 } }, required: ['usd'] } } } }, responses: { '200': { description: 'Credited', content: { 'application/json': { schema: { type: 'object' } } } }, ...errors(400, 401, 402, 503) } },
      },
      '/account/rotate-key': { post: { summary: 'Replace your api_key; the old one stops working', security: bearer, responses: { '200': { description: 'The new key', content: { 'application/json': { schema: { type: 'object', properties: { api_key: { type: 'string' } }, required: ['api_key'] } } } }, ...errors(401) } } },
      '/feedback': { post: { summary: 'Send feedback (no credential needed)', security: [{}], requestBody: jsonBody('FeedbackRequest'), responses: { '200': { description: 'Stored', content: { 'application/json': { schema: { type: 'object', properties: { ok: { type: 'boolean' } } } } } }, ...errors(400, 429) } } },
      '/healthz': { get: { summary: 'Liveness', security: [{}], responses: { '200': { description: 'OK', content: { 'application/json': { schema: { type: 'object', properties: { ok: { type: 'boolean' }, service: { type: 'string' } } } } } } } } },
      '/openapi.json': { get: { summary: 'This document', security: [{}], responses: { '200': { description: 'OpenAPI 3.1 document', content: { 'application/json': { schema: { type: 'object' } } } } } } },
    },
  };
}
