// A small method + path router for the APIs. Patterns are literal segments and `:name`
// parameters. It builds the handler context, runs the handler, writes the reply, maps errors
// (through errors.ts) and reports every answered request to an optional observer.

import { randomUUID } from 'node:crypto';
import type { Logger } from '../log/index.js';
import { AppError } from '../errors.js';
import { readBody, readJson } from './body.js';
import { errorReply } from './errors.js';
import { sendReply } from './reply.js';
import { HANDLED, type Ctx, type Handler, type HttpApp, type Req, type RequestInfo, type Res, type RouteOptions } from './types.js';

interface Route {
  method: string;
  pattern: string;
  parts: string[];
  handler: Handler;
  opts: Required<RouteOptions>;
}

export type RequestObserver = (route: string, method: string, status: number, ms: number) => void;

const DEFAULT_BODY_LIMIT = 64 * 1024;

export class Router implements HttpApp {
  private readonly routes: Route[] = [];
  private observer?: RequestObserver;

  constructor(private readonly log: Logger) {}

  on(method: string, pattern: string, handler: Handler, opts: RouteOptions = {}): this {
    this.routes.push({
      method: method.toUpperCase(),
      pattern,
      parts: pattern.split('/').filter(Boolean),
      handler,
      opts: { bodyLimit: opts.bodyLimit ?? DEFAULT_BODY_LIMIT },
    });
    return this;
  }

  observe(fn: RequestObserver): this {
    this.observer = fn;
    return this;
  }

  private match(method: string, path: string): { route?: Route; params: Record<string, string>; allowed: string[] } {
    const segs = path.split('/').filter(Boolean);
    const allowed: string[] = [];
    for (const r of this.routes) {
      if (r.parts.length !== segs.length) continue;
      const params: Record<string, string> = {};
      let ok = true;
      for (let i = 0; i < segs.length && ok; i++) {
        const p = r.parts[i];
        if (p.startsWith(':')) {
          try {
            params[p.slice(1)] = decodeURIComponent(segs[i]);
          } catch {
            ok = false;
          }
        } else ok = p === segs[i];
      }
      if (!ok) continue;
      if (r.method === method || (method === 'HEAD' && r.method === 'GET')) return { route: r, params, allowed };
      allowed.push(r.method);
    }
    return { params: {}, allowed };
  }

  async handle(req: Req, res: Res, info: RequestInfo): Promise<void> {
    const started = performance.now();
    const method = (req.method ?? 'GET').toUpperCase();
    const url = new URL(req.url ?? '/', 'http://x');
    const log = this.log.child({ rid: info.requestId });
    const { route, params, allowed } = this.match(method, url.pathname);
    const ctx: Ctx = {
      req,
      res,
      method,
      path: url.pathname,
      query: url.searchParams,
      params,
      host: info.host,
      ip: info.ip,
      scheme: info.scheme,
      requestId: info.requestId,
      log,
      json: () => readJson(req, route?.opts.bodyLimit ?? DEFAULT_BODY_LIMIT),
      raw: () => readBody(req, route?.opts.bodyLimit ?? DEFAULT_BODY_LIMIT),
    };
    let status = 500;
    try {
      if (!route) {
        if (allowed.length) {
          throw AppError.of('method_not_allowed', `${method} is not allowed on ${url.pathname}; use ${allowed.join(', ')}`, {
            headers: { allow: allowed.join(', ') },
          });
        }
        throw AppError.of('not_found', `no route for ${method} ${url.pathname.slice(0, 200)}`);
      }
      const result = await route.handler(ctx);
      if (result === HANDLED) status = res.statusCode;
      else status = sendReply(res, result, method === 'HEAD');
    } catch (err) {
      status = sendReply(res, errorReply(err, info.requestId, log), method === 'HEAD');
    }
    this.observer?.(route?.pattern ?? '(unmatched)', method, status, performance.now() - started);
  }
}

export const newRequestId = (incoming?: string | string[]): string =>
  typeof incoming === 'string' && /^[\w.-]{8,64}$/.test(incoming) ? incoming : randomUUID();
