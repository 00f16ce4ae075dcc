// POST /feedback: anyone may tell the operator something, no credential needed; stored in LMDB,
// rate-limited per source IP.

import { randomBytes } from 'node:crypto';
import { validate, type Ctx, type Reply } from '../http/index.js';
import { RateLimiter, tooMany } from '../ratelimit.js';
import type { Store } from '../store/index.js';
import { FeedbackRequest } from './schemas.js';


export function feedbackHandler(store: Store, limiter = new RateLimiter({ burst: 5, perSecond: 1 / 60 })) {
  return async (ctx: Ctx): Promise<Reply> => {
    const v = limiter.take(ctx.ip);
    if (!v.ok) throw tooMany('rate_limited', 'too much feedback from this address', v.retryAfter);
    const body = validate(FeedbackRequest, await ctx.json());
    const id = `fb_${Date.now().toString(36)}${randomBytes(4).toString('hex')}`;
    await store.feedback.add({ id, message: body.message, contact: body.contact, ip: ctx.ip, at: Date.now() });
    ctx.log.info('feedback stored', { id });
    return { status: 200, body: { ok: true } };
  };
}
