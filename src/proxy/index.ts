// <slug>.{domain}: the subdomain edge. Until servers exist, every slug is unknown.

import { AppError } from '../errors.js';
import { errorReply, sendReply, type HttpApp } from '../http/index.js';
import type { Logger } from '../log/index.js';

export function createProxy(deps: { log: Logger }): HttpApp {
  return {
    async handle(_req, res, info) {
      const slug = info.host.split('.')[0];
      sendReply(res, errorReply(new AppError('not_found', 'unknown_server', `no server is named ${slug}`), info.requestId, deps.log));
    },
  };
}
