// Public surface of the verification API (verify.{domain}): POST /v1/verify/{tier} paid with
// x402, and the free endpoints /v1/info, /v1/stats, /healthz, /.well-known/x402, /openapi.json
// (declared in routes.ts). Order of checks on the paid route: tier (404) → body (400) →
// configured (503) → payment (402) → passes; the first two are the route's own validation. The
// service is in service.ts, the daemon's part (main.ts) in part.ts.

export { createVerifyApi, type Counters, type VerifyDeps } from './service.js';
export { createVerify } from './part.js';
export { TIERS, DEFAULT_RUBRIC } from './tiers.js';
