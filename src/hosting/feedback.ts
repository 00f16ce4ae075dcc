// POST /feedback: anyone may tell the operator something, no credential needed; stored in LMDB,
// rate-limited per source IP (besides the API's own per-IP limit).

import { randomBytes } from 'node:crypto';
import { routes, type Route, type Step } from '../http/index.js';
import { RateLimiter, tooMany } from '../ratelimit.js';
import type { Store } from '../store/index.js';
import { FeedbackRequest, Ok } from './schemas.js';

export function feedbackRoute(store: Store, ipLimit: Step, limiter = new RateLimiter({ burst: 5, perSecond: 1 / 60 })): Route {
  const perIp: Step = {
    responses: { 429: 'Too much feedback from this address (5 at once, then one a minute), or too many requests (see Retry-After).' },
    run(ctx) {
      const v = limiter.take(ctx.ip);
      if (!v.ok) throw tooMany('rate_limited', 'too much feedback from this address', v.retryAfter);
    },
  };
  return routes()({
    method: 'POST',
    path: '/feedback',
    auth: 'none',
    summary: 'Send feedback (no credential needed)',
    use: [ipLimit, perIp],
    body: FeedbackRequest,
    bodyLimit: 16 * 1024,
    responses: { 200: { description: 'Stored', json: Ok } },
    async handler(ctx) {
      const id = `fb_${Date.now().toString(36)}${randomBytes(4).toString('hex')}`;
      await store.feedback.add({ id, message: ctx.body.message, contact: ctx.body.contact, ip: ctx.ip, at: Date.now() });
      ctx.log.info('feedback stored', { id });
      return { status: 200, body: { ok: true } };
    },
  });
}
