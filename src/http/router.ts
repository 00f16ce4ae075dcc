// A method + path router for declared routes (route.ts). Patterns are literal segments and
// `:name` parameters. For a request it runs the route's steps (rate limits), the authenticator
// when the route needs the caller, validates path parameters, query and JSON body with the
// route's zod schemas (400/404/413/415 on a mismatch), runs the handler, writes the reply, maps
// errors (through errors.ts) and reports every answered request to an optional observer.

import { randomUUID } from 'node:crypto';
import type { Logger } from '../log/index.js';
import { AppError } from '../errors.js';
import { readBody, readJson } from './body.js';
import { errorReply } from './errors.js';
import { inprocRequest, inprocResponse } from './inproc.js';
import { sendReply } from './reply.js';
import { DEFAULT_BODY_LIMIT, type Authenticator, type BaseCtx, type Method, type Route } from './route.js';
import {
  HANDLED,
  type Ctx,
  type Handler,
  type HandlerResult,
  type HttpApp,
  type Reply,
  type Req,
  type RequestInfo,
  type Res,
  type RouteOptions,
} from './types.js';
import { validate } from './validate.js';

interface Entry<A> {
  route: Route<A>;
  parts: string[];
  /** A route added with on(): undocumented, its handler reads its own inputs. */
  plain?: Handler;
}

/** A declared route's inputs given as values (Router.invoke). */
export interface Invocation {
  /** Request headers the steps and the authenticator read (authorization, accept), lower-case names. */
  headers: Record<string, string>;
  params: Record<string, string>;
  query: Record<string, string>;
  /** The JSON body as parsed, or undefined. */
  body: unknown;
  /** The raw body of a route that reads its request stream (a file upload). */
  raw?: Buffer;
  info: RequestInfo;
  /** Most bytes of an answer the route streams itself (default 8 MiB): past it the answer is cut. */
  maxAnswer?: number;
}

export type RequestObserver = (route: string, method: string, status: number, ms: number) => void;

export interface RouterOptions<A> {
  /** Who is calling, for routes whose auth is bearer or optional. */
  auth?: Authenticator<A>;
}

export class Router<A = never> implements HttpApp {
  private readonly entries: Entry<A>[] = [];
  private observer?: RequestObserver;

  constructor(
    private readonly log: Logger,
    readonly options: RouterOptions<A> = {},
  ) {}

  /** Declared routes, in the order they were added (what the OpenAPI document describes). */
  get routes(): readonly Route<A>[] {
    return this.entries.filter((e) => !e.plain).map((e) => e.route);
  }

  add(...routes: Route<A>[]): this {
    for (const route of routes) {
      if (route.auth !== 'none' && !this.options.auth) throw new Error(`${route.method} ${route.path} needs a caller but the router has no authenticator`);
      this.entries.push({ route, parts: route.path.split('/').filter(Boolean) });
    }
    return this;
  }

  /** An undocumented route whose handler reads its own inputs (test apps and fallbacks). */
  on(method: string, pattern: string, handler: Handler, opts: RouteOptions = {}): this {
    const route: Route<A> = {
      method: method.toUpperCase() as Method,
      path: pattern,
      auth: 'none',
      summary: '',
      responses: {},
      bodyLimit: opts.bodyLimit,
      handler: () => HANDLED,
    };
    this.entries.push({ route, parts: route.path.split('/').filter(Boolean), plain: handler });
    return this;
  }

  observe(fn: RequestObserver): this {
    this.observer = fn;
    return this;
  }

  private match(method: string, path: string): { entry?: Entry<A>; params: Record<string, string>; allowed: string[] } {
    const segs = path.split('/').filter(Boolean);
    const allowed: string[] = [];
    for (const e of this.entries) {
      if (e.parts.length !== segs.length) continue;
      const params: Record<string, string> = {};
      let ok = true;
      for (let i = 0; i < segs.length && ok; i++) {
        const p = e.parts[i];
        if (p.startsWith(':')) {
          try {
            params[p.slice(1)] = decodeURIComponent(segs[i]);
          } catch {
            ok = false;
          }
        } else ok = p === segs[i];
      }
      if (!ok) continue;
      if (e.route.method === method || (method === 'HEAD' && e.route.method === 'GET')) return { entry: e, params, allowed };
      if (!allowed.includes(e.route.method)) allowed.push(e.route.method);
    }
    return { params: {}, allowed };
  }

  async handle(req: Req, res: Res, info: RequestInfo): Promise<void> {
    const started = performance.now();
    const method = (req.method ?? 'GET').toUpperCase();
    const url = new URL(req.url ?? '/', 'http://x');
    const log = this.log.child({ rid: info.requestId });
    const { entry, params, allowed } = this.match(method, url.pathname);
    const base: BaseCtx = {
      req,
      res,
      method,
      path: url.pathname,
      search: url.searchParams,
      rawParams: params,
      host: info.host,
      ip: info.ip,
      scheme: info.scheme,
      requestId: info.requestId,
      forwarded: info.forwarded,
      counted: info.counted,
      log,
    };
    let status = 500;
    try {
      if (!entry) {
        if (allowed.length) {
          throw new AppError(
            'method_not_allowed',
            'method_not_allowed',
            `${method} is not allowed on ${url.pathname.slice(0, 200)}; use ${allowed.join(', ')}`,
            {
              headers: { allow: allowed.join(', ') },
            },
          );
        }
        throw new AppError('not_found', 'not_found', `no route for ${method} ${url.pathname.slice(0, 200)}`);
      }
      const result = entry.plain ? await entry.plain(plainCtx(base, entry.route.bodyLimit ?? DEFAULT_BODY_LIMIT)) : await this.run(entry.route, base);
      if (result === HANDLED) status = res.statusCode;
      else status = sendReply(res, result, method === 'HEAD');
    } catch (err) {
      status = sendReply(res, errorReply(err, info.requestId, log), method === 'HEAD');
    }
    this.observer?.(entry?.route.path ?? '(unmatched)', method, status, performance.now() - started);
  }

  /**
   * Runs one declared route in-process with inputs given as values instead of a request stream
   * (the MCP tools): the same steps, caller, validation, handler and error mapping as `handle`,
   * the answer returned instead of sent. A route that writes its own response (a file, a stream)
   * writes it into a collecting response (inproc.ts); its body is then a Buffer.
   */
  async invoke(r: Route<A>, call: Invocation): Promise<Reply & { cut?: boolean }> {
    const started = performance.now();
    const log = this.log.child({ rid: call.info.requestId });
    const headers = { ...call.headers, ...(call.raw ? { 'content-length': String(call.raw.length) } : {}) };
    const req = inprocRequest(r.method, r.path, headers, call.raw);
    const { res, done } = inprocResponse(call.maxAnswer ?? 8 * 1024 * 1024);
    const base: BaseCtx = {
      req,
      res,
      method: r.method,
      path: r.path,
      search: new URLSearchParams(call.query),
      rawParams: call.params,
      host: call.info.host,
      ip: call.info.ip,
      scheme: call.info.scheme,
      requestId: call.info.requestId,
      forwarded: call.info.forwarded,
      counted: call.info.counted,
      log,
    };
    let reply: Reply & { cut?: boolean };
    try {
      const result = await this.run(r, base, r.body ? () => call.body : undefined);
      if (result === HANDLED) {
        if (!res.writableEnded && !res.destroyed) res.end();
        const c = await done;
        reply = { status: c.status, headers: c.headers, body: c.body, cut: c.cut };
      } else reply = result;
    } catch (err) {
      reply = errorReply(err, call.info.requestId, log);
    }
    this.observer?.(r.path, r.method, reply.status, performance.now() - started);
    return reply;
  }

  /** Steps, caller, path parameters, query, body, handler: in that order. */
  private async run(r: Route<A>, base: BaseCtx, given?: () => unknown): Promise<HandlerResult> {
    for (const step of r.use ?? []) await step.run(base);
    const auth =
      r.auth === 'bearer' || (r.auth === 'optional' && base.req.headers.authorization !== undefined) ? await this.options.auth!.run(base) : undefined;
    let params: unknown = {};
    if (r.params) {
      const p = r.params.safeParse(base.rawParams);
      if (!p.success) throw r.notFound?.(base.rawParams) ?? new AppError('not_found', 'not_found', `no such resource: ${base.path.slice(0, 200)}`);
      params = p.data;
    }
    const query = r.query ? validate(r.query, Object.fromEntries(base.search), 'query') : {};
    const raw = given ? given() : r.body ? await readJson(base.req, r.bodyLimit ?? DEFAULT_BODY_LIMIT) : undefined;
    const body = r.body ? validate(r.body, raw, 'body') : undefined;
    return r.handler({ ...base, auth, params, query, body } as never);
  }
}

function plainCtx(base: BaseCtx, limit: number): Ctx {
  const { search, rawParams, ...rest } = base;
  return { ...rest, query: search, params: rawParams, json: () => readJson(base.req, limit), raw: () => readBody(base.req, limit) };
}

export const newRequestId = (incoming?: string | string[]): string =>
  typeof incoming === 'string' && /^[\w.-]{8,64}$/.test(incoming) ? incoming : randomUUID();
