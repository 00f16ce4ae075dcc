// The daemon's verify part (main.ts's createVerify): the verification API made from the config's
// `verify` section, over the configured LLM, the payments' paywall and the store's counters.

import type { Config } from '../config/index.js';
import type { HttpApp } from '../http/index.js';
import { createLlm } from '../llm/index.js';
import type { Logger } from '../log/index.js';
import type { Paywall } from '../payments/index.js';
import { PublicUrls } from '../pages/index.js';
import { createVerifyApi, type Counters } from './service.js';

/** The daemon's verify part (main.ts): the API over the configured LLM and the payments' paywall. */
export function createVerify(d: {
  cfg: Readonly<Pick<Config, 'verify' | 'public'>>;
  payments: { paywall: Paywall };
  store: { stats: Counters };
  log: Logger;
}): HttpApp {
  const { verify } = d.cfg;
  const { llm } = verify;
  return createVerifyApi({
    log: d.log,
    serviceName: verify.serviceName,
    paywall: d.payments.paywall,
    llm: createLlm(llm),
    models: llm.models,
    llmSettings: { temperature: llm.temperature, maxTokens: llm.maxTokens, passTimeoutMs: llm.passTimeout },
    facilitatorUrl: verify.x402.facilitatorUrl,
    stats: d.store.stats,
    urls: new PublicUrls(d.cfg.public),
  });
}
