// The verification API's routes, each declared once (method, path, inputs, every answer); the
// Router serves them and /openapi.json describes them from these declarations. Every path also
// answers a CORS preflight (OPTIONS, 204).

import { AppError } from '../errors.js';
import { routes, type BaseCtx, type HandlerResult, type Route, type RouteCtx } from '../http/index.js';
import { challengeBodySchema } from '../payments/index.js';
import {
  healthSchema,
  homeSchema,
  infoSchema,
  manifestSchema,
  openApiSchema,
  statsSchema,
  tierPathSchema,
  verifyReportSchema,
  verifyRequestSchema,
} from './schemas.js';
import { TIER_NAMES } from './tiers.js';
import { z } from 'zod';

export type VerifyCtx = RouteCtx<undefined, z.output<typeof verifyRequestSchema>, Record<string, never>, z.output<typeof tierPathSchema>>;

export interface VerifyRouteDeps {
  serviceName: string;
  /** `GET /`: the front page for a browser (Accept: text/html), its facts as JSON otherwise. */
  home(ctx: BaseCtx): HandlerResult;
  info(ctx: BaseCtx): unknown;
  manifest(ctx: BaseCtx): unknown;
  stats(): unknown;
  document(ctx: BaseCtx): Record<string, unknown>;
  verify(ctx: VerifyCtx): Promise<HandlerResult>;
}

const PREFLIGHT = {
  'access-control-allow-methods': 'GET, POST, OPTIONS',
  'access-control-allow-headers': 'content-type, x-payment, payment-signature',
  'access-control-max-age': '600',
};
const unwired = 'Payments are not wired on this host.';

export function verifyRoutes(d: VerifyRouteDeps): Route[] {
  const route = routes();
  const free = [
    route({
      method: 'GET',
      path: '/',
      auth: 'none',
      summary: 'What this service is: a page for browsers (Accept: text/html), the same facts as JSON otherwise',
      responses: {
        200: {
          description: 'What the service does, tiers and prices, how to pay with x402, links to /v1/info and /openapi.json',
          json: homeSchema,
          media: { 'text/html': z.string() },
        },
      },
      handler: (ctx) => d.home(ctx),
    }),
    route({
      method: 'GET',
      path: '/healthz',
      auth: 'none',
      summary: 'Liveness',
      responses: { 200: { description: 'OK', json: healthSchema } },
      handler: () => ({ status: 200, body: { ok: true, service: d.serviceName } }),
    }),
    route({
      method: 'GET',
      path: '/openapi.json',
      auth: 'none',
      summary: 'This document',
      responses: { 200: { description: 'OpenAPI 3.1 document', json: openApiSchema } },
      handler: (ctx) => ({ status: 200, body: d.document(ctx) }),
    }),
    route({
      method: 'GET',
      path: '/v1/info',
      auth: 'none',
      summary: 'Service card: tiers, prices, request shape',
      responses: { 200: { description: 'OK', json: infoSchema }, 503: unwired },
      handler: (ctx) => ({ status: 200, body: d.info(ctx) }),
    }),
    route({
      method: 'GET',
      path: '/.well-known/x402',
      auth: 'none',
      summary: 'x402 manifest of paid resources',
      responses: { 200: { description: 'Manifest', json: manifestSchema }, 503: unwired },
      handler: (ctx) => ({ status: 200, body: d.manifest(ctx) }),
    }),
    route({
      method: 'GET',
      path: '/v1/stats',
      auth: 'none',
      summary: 'Usage statistics',
      responses: { 200: { description: 'OK', json: statsSchema } },
      handler: () => ({ status: 200, body: d.stats() }),
    }),
    route({
      method: 'POST',
      path: '/v1/verify/:tier',
      auth: 'none',
      summary: 'Verify an artifact (paid per call with x402)',
      description: 'Order of checks: tier (404), body (400), configuration (503), payment (402), then the passes.',
      params: tierPathSchema,
      notFound: (p) =>
        new AppError('not_found', 'unknown_tier', `tier ${JSON.stringify(String(p.tier).slice(0, 40))} does not exist; use one of ${TIER_NAMES.join(', ')}`),
      headers: { 'X-PAYMENT': { description: 'x402 payment payload (base64 JSON) on the paid retry; PAYMENT-SIGNATURE is accepted too.' } },
      body: verifyRequestSchema,
      bodyLimit: 1024 * 1024,
      responses: {
        200: {
          description: 'Verification report; the payment was settled (or is being settled).',
          json: verifyReportSchema,
          headers: { 'PAYMENT-RESPONSE': { description: 'x402 settlement response (base64 JSON).', required: true } },
        },
        400: 'Artifact missing, empty or too long; rubric too long; body not JSON.',
        402: {
          description: 'Payment required, invalid, refused or already used: the x402 terms',
          json: challengeBodySchema,
          headers: { 'PAYMENT-REQUIRED': { description: 'x402 v2 payment terms (base64 JSON; reads the same as base64url).', required: true } },
        },
        404: 'Unknown tier.',
        502: 'Fewer than a majority of passes completed because of provider errors, or the facilitator (with self-settlement: the chain) could not be reached; the payment was not settled.',
        503: 'The operator has not configured the language model or the payment recipient, or payments cannot be taken now (payments_unavailable: the facilitator lacks our network or refuses our key, the gas wallet is low).',
      },
      handler: (ctx) => d.verify(ctx as VerifyCtx),
    }),
  ];
  const preflights = free.map((r) =>
    route({
      method: 'OPTIONS',
      path: r.path,
      auth: 'none',
      summary: 'CORS preflight',
      responses: {
        204: { description: 'Allowed methods and headers', headers: { 'Access-Control-Allow-Methods': { description: 'GET, POST, OPTIONS', required: true } } },
      },
      handler: () => ({ status: 204, headers: PREFLIGHT }),
    }),
  );
  return [...free, ...preflights];
}
