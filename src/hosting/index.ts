// Hosting API (api.{domain} and {domain}). Routes for accounts and servers are added here as
// the hosting issues land; today it answers the free health endpoint.

import { Router } from '../http/index.js';
import type { Logger } from '../log/index.js';

export interface HostingDeps {
  log: Logger;
}

export const HOSTING_SERVICE = 'rootbox';

export function createHostingApi(deps: HostingDeps): Router {
  return new Router(deps.log).on('GET', '/healthz', () => ({ status: 200, body: { ok: true, service: HOSTING_SERVICE } }));
}
