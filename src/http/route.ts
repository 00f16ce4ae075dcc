// Route declarations: one object per route — method, path, auth, the zod schemas of its body,
// query and path parameters, and of every answer by status — from which both the Router
// (matching, authentication, validation; router.ts) and the OpenAPI document (openapi.ts) are
// derived, so what a route accepts and answers is written down once.

import type { z } from 'zod';
import type { Ctx, HandlerResult } from './types.js';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS';

/** none: public. bearer: the router's authenticator must accept the request. optional: the
 *  authenticator runs only when an Authorization header is sent. */
export type Auth = 'none' | 'bearer' | 'optional';

export interface HeaderDoc {
  description: string;
  /** Always sent with this answer (the contract test checks it). */
  required?: boolean;
}

/** One documented answer. */
export interface AnswerDoc {
  description: string;
  /** Schema of the application/json body. */
  json?: z.ZodType;
  /** Other representations of the same answer by media type (e.g. text/html → z.string()). */
  media?: Record<string, z.ZodType>;
  headers?: Record<string, HeaderDoc>;
}

/** Answers by status. An error answer may be given as its description alone: its body is then the
 *  standard error body of its status (schemas.ts). */
export type Answers = Partial<Record<number, AnswerDoc | string>>;

/** The request as steps and the authenticator see it, before its inputs are validated. */
export type BaseCtx = Omit<Ctx, 'json' | 'raw' | 'query' | 'params'> & {
  /** The raw query string. */
  search: URLSearchParams;
  /** Path parameters as they came (percent-decoded), before `params` validated them. */
  rawParams: Record<string, string>;
};

/** What a declared route's handler gets: the caller and its validated inputs. */
export type RouteCtx<A = unknown, B = unknown, Q = unknown, P = unknown> = BaseCtx & { auth: A; body: B; query: Q; params: P };

/** Something that runs before authentication on the routes that list it (a rate limit), with
 *  the answers it may give, which are documented on each of those routes. */
export interface Step {
  responses: Answers;
  run(ctx: BaseCtx): void | Promise<void>;
}

/** Who is calling: run on routes whose auth is bearer (or optional with a credential sent). */
export interface Authenticator<A> {
  /** Name and OpenAPI object of the security scheme (components.securitySchemes). */
  scheme: { name: string; doc: Record<string, unknown> };
  /** What authentication may answer instead (401, a per-key 429). */
  responses: Answers;
  run(ctx: BaseCtx): A | Promise<A>;
}

type Out<S> = S extends z.ZodType ? z.output<S> : Record<string, never>;
type Caller<A, Au extends Auth> = Au extends 'bearer' ? A : Au extends 'optional' ? A | undefined : undefined;
type Obj = z.ZodObject | undefined;

export interface RouteSpec<A, Au extends Auth, B extends z.ZodType | undefined, Q extends Obj, P extends Obj> {
  method: Method;
  /** Literal segments and `:name` parameters, e.g. `/servers/:id`. */
  path: string;
  auth: Au;
  summary: string;
  description?: string;
  /** JSON body. A schema that accepts undefined (`.optional()`) makes the body optional. */
  body?: B;
  /** Query parameters; strings coerced by the schema (z.coerce.number() …). */
  query?: Q;
  /** Path parameters; a mismatch is answered by `notFound` (default 404 not_found). */
  params?: P;
  notFound?(raw: Record<string, string>): Error;
  /** Request headers worth documenting (e.g. X-PAYMENT). */
  headers?: Record<string, HeaderDoc>;
  /** Steps run first, in order (rate limits). */
  use?: Step[];
  responses: Answers;
  /** Largest accepted body in bytes (413 beyond). Default 64 KiB. */
  bodyLimit?: number;
  handler(ctx: RouteCtx<Caller<A, Au>, B extends z.ZodType ? z.output<B> : undefined, Out<Q>, Out<P>>): HandlerResult | Promise<HandlerResult>;
}

/** A declared route, as the Router and the document generator hold it. */
export type Route<A = any> = RouteSpec<A, Auth, any, any, any>;

/** The declaring function of an API whose authenticator yields `A`:
 *  `const route = routes<Account>(); route({ method: 'GET', path: '/x', auth: 'bearer', … })`. */
export function routes<A = never>() {
  return <Au extends Auth, B extends z.ZodType | undefined = undefined, Q extends Obj = undefined, P extends Obj = undefined>(
    spec: RouteSpec<A, Au, B, Q, P>,
  ): Route<A> => spec as unknown as Route<A>;
}

export const DEFAULT_BODY_LIMIT = 64 * 1024;
