// Hosting API (api.{domain} and {domain}): the routes of spec/hosting-service.md.

import { Router } from '../http/index.js';
import type { Logger } from '../log/index.js';
import type { Store } from '../store/index.js';
import { feedbackHandler } from './feedback.js';

export interface HostingDeps {
  log: Logger;
  store: Store;
}

export const HOSTING_SERVICE = 'rootbox';

export function createHostingApi(deps: HostingDeps): Router {
  return new Router(deps.log)
    .on('GET', '/healthz', () => ({ status: 200, body: { ok: true, service: HOSTING_SERVICE } }))
    .on('POST', '/feedback', feedbackHandler(deps.store), { bodyLimit: 16 * 1024 });
}
