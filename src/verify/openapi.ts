// /openapi.json: OpenAPI 3.1.0, info.version 1.0.0, its schemas generated from the zod schemas
// the handlers validate and return (schemas.ts), so the description cannot drift from the code.

import { z } from 'zod';
import { registry } from './schemas.js';
import { TIER_NAMES } from './tiers.js';

const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });
const json = (id: string, description: string) => ({ description, content: { 'application/json': { schema: ref(id) } } });

function components(): Record<string, unknown> {
  const { schemas } = z.toJSONSchema(registry, { uri: (id) => `#/components/schemas/${id}`, unrepresentable: 'any' }) as { schemas: Record<string, Record<string, unknown>> };
  for (const s of Object.values(schemas)) {
    delete s.$schema;
    delete s.$id;
  }
  return schemas;
}

export function openApiDocument(opts: { serviceName: string; serverUrl?: string }): Record<string, unknown> {
  const paymentHeader = { description: 'x402 v2 payment terms (base64 JSON; reads the same as base64url).', schema: { type: 'string' } };
  const free = (id: string, summary: string) => ({ get: { summary, responses: { '200': json(id, 'OK') } } });
  return {
    openapi: '3.1.0',
    info: {
      title: `${opts.serviceName} verification API`,
      version: '1.0.0',
      description: 'Judges a text artifact against a rubric with several independent AI verifier passes. Each call is paid with x402 (scheme exact).',
    },
    ...(opts.serverUrl ? { servers: [{ url: opts.serverUrl }] } : {}),
    paths: {
      '/v1/verify/{tier}': {
        post: {
          summary: 'Verify an artifact (paid per call with x402)',
          parameters: [
            { name: 'tier', in: 'path', required: true, schema: { type: 'string', enum: TIER_NAMES } },
            { name: 'X-PAYMENT', in: 'header', required: false, description: 'x402 payment payload (base64 JSON) on the paid retry; PAYMENT-SIGNATURE is accepted too.', schema: { type: 'string' } },
          ],
          requestBody: { required: true, content: { 'application/json': { schema: ref('VerifyRequest') } } },
          responses: {
            '200': {
              ...json('VerifyReport', 'Verification report; the payment was settled.'),
              headers: { 'PAYMENT-RESPONSE': { description: 'x402 settlement response (base64 JSON).', schema: { type: 'string' } } },
            },
            '400': json('Error', 'Artifact missing, empty or too long; rubric too long; body not JSON.'),
            '402': { ...json('Error', 'Payment required, invalid or already used.'), headers: { 'PAYMENT-REQUIRED': paymentHeader } },
            '404': json('Error', 'Unknown tier.'),
            '502': json('Error', 'Fewer than a majority of passes completed because of provider errors; the payment was not settled.'),
            '503': json('Error', 'The operator has not configured the language model or the payment recipient.'),
          },
        },
      },
      '/v1/info': free('ServiceInfo', 'Service card: tiers, prices, request shape'),
      '/v1/stats': free('Stats', 'Usage statistics'),
      '/healthz': free('Health', 'Liveness'),
      '/.well-known/x402': { get: { summary: 'x402 manifest of paid resources', responses: { '200': { description: 'Manifest', content: { 'application/json': { schema: { type: 'object' } } } } } } },
      '/openapi.json': { get: { summary: 'This document', responses: { '200': { description: 'OpenAPI 3.1 document', content: { 'application/json': { schema: { type: 'object' } } } } } } },
    },
    components: { schemas: components() },
  };
}
