// Verification API (verify.{domain}).

import { Router } from '../http/index.js';
import type { Logger } from '../log/index.js';

export interface VerifyDeps {
  log: Logger;
  serviceName: string;
}

export function createVerifyApi(deps: VerifyDeps): Router {
  return new Router(deps.log).on('GET', '/healthz', () => ({ status: 200, body: { ok: true, service: deps.serviceName } }));
}
