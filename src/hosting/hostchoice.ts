// The choice of a host for a new server (issue 29 item 5): where a POST /create is served. Not a
// placement (the registry's record of the host a server runs on, written by the host that makes
// it). Here when this host has room for the tier the new server will have; otherwise, in cluster
// mode, the whole request (method, path, the client's headers with its credential, the body) goes
// to the up host with the most room over the channel and that host's answer is the client's — the
// same answer as a local create, since that host runs the same handler. A create that came over
// the channel (ctx.forwarded) is never sent on again: that host answers 503 at_capacity when it
// is full too. The choice is made before anything changes (no account made, no SMS code used), so
// the host that creates does all of it. Without room and without another host: 503 at_capacity.
// A host being drained (moves/drain.ts) serves no create itself, as if it had no room, and the
// others' choice skips it (main.ts).

import { AppError } from '../errors.js';
import { HANDLED, type Req, type RequestInfo, type Res, type RouteCtx } from '../http/index.js';
import type { AccountRecord } from '../store/index.js';
import { TIER_LIMITS, tierOf, type Tier } from './accounts.js';
import { chooseHost, shortOf, type Capacity, type HostRoom } from './capacity.js';
import { E164 } from './phone.js';

/** A create sent on to another host: the client's request (its body read already: given again
 *  as JSON, its Content-Length and Content-Type the given body's; an MCP tool call's in-process
 *  request has none). */
export interface ForwardedCreate {
  req: Req;
  res: Res;
  info: RequestInfo;
  body: Buffer;
}

/** Registry mode: the hosts a create may go to, and the way to them (wired in main.ts). */
export interface HostChoice {
  /** This host's name in the cluster. */
  self: string;
  /** Every host with its lease and the capacity it last reported, read from the registry now. */
  hosts(): Promise<HostRoom[]>;
  /** Sends the create to `host`'s API over the channel and relays its answer to `call.res`. */
  forward(host: string, call: ForwardedCreate): Promise<void>;
  /** Why this host takes no create now though it has room (it is being drained), undefined when it takes them. */
  closed?(): string | undefined;
  /** This host's room changed (a server made here): its lease says so now, not at the next heartbeat. */
  changed(): void;
}

interface CreateBody {
  phone?: string;
  code?: string;
}

/** The tier the created server will have, known without changing anything: a phone login takes
 *  the tier of the phone's account (looked up, the code not used yet), or at least verified. */
async function tierAhead(
  ctx: RouteCtx<AccountRecord | undefined, unknown>,
  body: CreateBody,
  byPhone: (p: string) => Promise<AccountRecord | undefined>,
): Promise<Tier> {
  const phone = body.phone?.trim();
  if (phone !== undefined && E164.test(phone)) {
    const known = await byPhone(phone);
    if (known) return tierOf(known);
    return ctx.auth && ctx.auth.balanceUsd > 0 ? 'paid' : 'verified';
  }
  return ctx.auth ? tierOf(ctx.auth) : 'anonymous';
}

/** Settles when the answer written to `res` is over: an MCP tool call's in-process response is
 *  read as soon as the handler returns. */
function over(res: Res): Promise<void> {
  return new Promise((resolve) => {
    if ((res as { writableFinished?: boolean }).writableFinished || res.destroyed) return resolve();
    res.once('finish', () => resolve());
    res.once('close', () => resolve());
  });
}

/**
 * Undefined when this host serves the create; HANDLED when another host answered it (written to
 * the client); throws at_capacity when no host has room. Phone step 1 (no code yet: no server
 * made) is always served here.
 */
export async function chooseCreateHost(
  ctx: RouteCtx<AccountRecord | undefined, unknown>,
  body: CreateBody,
  here: () => Capacity,
  byPhone: (p: string) => Promise<AccountRecord | undefined>,
  choice: HostChoice | undefined,
): Promise<typeof HANDLED | undefined> {
  if (body.phone !== undefined && body.code === undefined) return undefined;
  const need = TIER_LIMITS[await tierAhead(ctx, body, byPhone)];
  const why = choice?.closed?.() ?? shortOf(here(), need);
  if (!why) return undefined;
  const from = ctx.forwarded;
  if (choice && !from) {
    const hosts = await choice.hosts().catch((err) => {
      ctx.log.warn('create: the other hosts could not be read from the registry', { detail: (err as Error).message });
      return [];
    });
    const host = chooseHost(hosts, choice.self, need);
    if (host) {
      ctx.log.info('create placed on another host', { host, why });
      // the body as validated here (the route read the client's bytes): the same create, its length its own
      const sent = ctx.body === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(ctx.body));
      const headers = { ...ctx.req.headers, 'content-length': String(sent.length), ...(sent.length ? { 'content-type': 'application/json' } : {}) };
      await choice.forward(host, {
        req: Object.create(ctx.req, { headers: { value: headers } }) as Req, // the request's own getters stay
        res: ctx.res,
        info: { host: ctx.host, scheme: ctx.scheme, ip: ctx.ip, requestId: ctx.requestId },
        body: sent,
      });
      await over(ctx.res);
      return HANDLED;
    }
  }
  const detail = from ? `; ${from} placed it here as the host with the most room` : choice ? ' and no other host has room' : '';
  throw AppError.of('at_capacity', `this host ${why}${detail}; try again later`);
}
