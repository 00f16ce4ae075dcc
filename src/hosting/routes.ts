// The hosting API's routes, each declared once (method, path, auth, inputs, every answer); the
// Router serves them and /openapi.json describes them from these declarations. While an account
// is exhausted, read endpoints answer 402 with the upgrade envelope and, beside it, what they
// would have answered: `servers`, `server` + `suspended`, `credits`. `GET /` is the landing page
// (HTML for browsers, JSON for agents). Absolute URLs are built from the configured public scheme
// and port, or from the listener that serves the request (src/pages/urls.ts).

import { z } from 'zod';
import { AppError } from '../errors.js';
import { routes, type BaseCtx, type Route, type Step } from '../http/index.js';
import { landingInfo, landingReply, PublicUrls, wantsHtml, type LandingFacts } from '../pages/index.js';
import type { AccountRecord } from '../store/index.js';
import { tierOf } from './accounts.js';
import type { HostingCore, HostingDeps } from './core.js';
import { handleCreate } from './create.js';
import { domainRoutes } from './domains.js';
import type { Elsewhere } from './elsewhere.js';
import { LogsAnswer, LogsQuery, serverLogs } from './logs.js';
import { toolboxRoutes } from './toolbox.js';
import { checkpointRoutes } from './checkpointroutes.js';
import {
  CreateRequest,
  CreateResponse,
  Credits,
  ExposedPort,
  ExposeRequest,
  Health,
  Landing,
  Ok,
  OpenApi,
  PortLimitError,
  RotatedKey,
  Server,
  ServerList,
  ServerPath,
  UpgradeEnvelope,
  UsagePage,
  UsageQuery,
  VerificationRequired,
} from './schemas.js';

export interface HostingRouteDeps {
  core: HostingCore;
  deps: HostingDeps;
  service: string;
  /** Per-IP request limit (every route but /healthz and /openapi.json). */
  ipLimit: Step;
  /** Per-IP creates per hour. */
  createLimit: Step;
  document(serverUrl: string): Record<string, unknown>;
  /** Cluster mode: the account's servers on other hosts (GET /servers). */
  elsewhere: Pick<Elsewhere, 'others'>;
}

const envelope = {
  description: 'The account used up its free grant and has no credit: the upgrade envelope, with what the route would have answered beside it',
  json: UpgradeEnvelope,
};
const ok = { status: 200, body: { ok: true } };

export function hostingRoutes({ core, deps, service, ipLimit, createLimit, document, elsewhere }: HostingRouteDeps): Route<AccountRecord>[] {
  const route = routes<AccountRecord>();
  const urls = new PublicUrls(deps.cfg.public);
  /** This API's origin as the client reaches it ({domain} or api.{domain}, whichever it asked). */
  const base = (ctx: BaseCtx) => urls.origin(ctx.req, ctx.scheme, ctx.host);
  const landing = (ctx: BaseCtx): LandingFacts => {
    const b = deps.cfg.billing;
    return {
      domain: deps.cfg.domain,
      api: base(ctx),
      verify: urls.origin(ctx.req, ctx.scheme, `verify.${deps.cfg.domain}`),
      prices: { ramUsdPerGbHour: b.ramUsdPerGbHour, diskUsdPerGbMonth: b.diskUsdPerGbMonth, egressUsdPerGb: b.egressUsdPerGb },
      grant: {
        ramGbHours: b.grantRamGbHours,
        egressGb: b.grantEgressGb,
        verifiedRamGbHours: b.verifiedGrantRamGbHours,
        verifiedEgressGb: b.verifiedGrantEgressGb,
      },
    };
  };
  const serverNotFound = (p: Record<string, string>) => new AppError('not_found', 'server_not_found', `you have no server ${String(p.id).slice(0, 40)}`);
  const server = { params: ServerPath, notFound: serverNotFound, use: [ipLimit] };
  return [
    route({
      method: 'GET',
      path: '/',
      auth: 'none',
      summary: 'What this host offers: the landing page for browsers (Accept: text/html), the same facts as JSON otherwise',
      use: [ipLimit],
      responses: {
        200: {
          description: 'How to create a server, where the API description and the verification service are, prices',
          json: Landing,
          media: { 'text/html': z.string() },
        },
      },
      handler: (ctx) => (wantsHtml(ctx.req) ? landingReply(landing(ctx)) : { status: 200, headers: { vary: 'Accept' }, body: landingInfo(landing(ctx)) }),
    }),
    route({
      method: 'GET',
      path: '/healthz',
      auth: 'none',
      summary: 'Liveness',
      responses: { 200: { description: 'OK', json: Health } },
      handler: () => ({ status: 200, body: { ok: true, service } }),
    }),
    route({
      method: 'GET',
      path: '/openapi.json',
      auth: 'none',
      summary: 'This document',
      responses: { 200: { description: 'OpenAPI 3.1 document', json: OpenApi } },
      handler: (ctx) => ({ status: 200, body: document(base(ctx)) }),
    }),
    route({
      method: 'POST',
      path: '/create',
      auth: 'optional',
      summary: 'Create a server (and an account when called without credential)',
      use: [ipLimit, createLimit],
      body: CreateRequest.optional(),
      bodyLimit: 16 * 1024,
      responses: {
        200: { description: 'The server, or a verification_required answer in phone step 1', json: z.union([CreateResponse, VerificationRequired]) },
        400: 'Bad input: body, phone number, SMS code (wrong, expired, none pending), or a number the SMS provider refuses.',
        402: envelope,
        403: 'A limit: anonymous servers per address, servers per account, or never_sleep without a verified phone.',
        409: 'Every wanted subdomain is taken.',
        429: 'Too many requests, creates or SMS codes from this address or to this number, or too many wrong codes (see Retry-After).',
        502: 'The SMS provider failed.',
        503: 'The host is at capacity, could not create the server, or SMS is not configured.',
      },
      handler: (ctx) => handleCreate(ctx, core),
    }),
    route({
      method: 'GET',
      path: '/servers',
      auth: 'bearer',
      summary: 'List your servers (in a cluster, those of every host)',
      use: [ipLimit],
      responses: { 200: { description: 'Servers', json: ServerList }, 402: envelope },
      async handler(ctx) {
        const info = { host: ctx.host, scheme: ctx.scheme, ip: ctx.ip, requestId: ctx.requestId, forwarded: ctx.forwarded };
        const [here, others] = await Promise.all([
          Promise.all(core.servers.list(ctx.auth).map((s) => core.servers.view(s, ctx.auth))),
          elsewhere.others(ctx.auth.id, ctx.req.headers.authorization, info),
        ]);
        // those of hosts that are down or gave no list, from the placement cache (not in a list another host asked for: it adds them itself)
        const servers = [...here, ...(others.servers as typeof here), ...(ctx.forwarded ? [] : core.unavailable.all(ctx.auth, others.silent))];
        core.assertNotExhausted(ctx.auth, base(ctx), { servers });
        return { status: 200, body: { servers } };
      },
    }),
    route({
      method: 'GET',
      path: '/servers/:id',
      auth: 'bearer',
      summary: 'Read a server',
      ...server,
      responses: { 200: { description: 'The server', json: Server }, 402: envelope, 404: 'No such server of yours.' },
      async handler(ctx) {
        const away = core.unavailable.one(ctx.auth, ctx.params.id); // cluster mode: its host is down
        const view = away ?? (await core.servers.view(core.servers.owned(ctx.auth, ctx.params.id), ctx.auth));
        core.assertNotExhausted(ctx.auth, base(ctx), { suspended: view.suspended, server: view });
        return { status: 200, body: view };
      },
    }),
    route({
      method: 'DELETE',
      path: '/servers/:id',
      auth: 'bearer',
      summary: 'Delete a server and free everything it held',
      ...server,
      responses: { 200: { description: 'Deleted', json: Ok }, 404: 'No such server of yours.' },
      async handler(ctx) {
        await core.servers.delete(core.servers.owned(ctx.auth, ctx.params.id));
        return ok;
      },
    }),
    route({
      method: 'POST',
      path: '/servers/:id/restart',
      auth: 'bearer',
      summary: 'Restart a server',
      ...server,
      responses: {
        200: { description: 'The restarted server', json: Server },
        402: 'The server is suspended until credit is added.',
        404: 'No such server of yours.',
        503: 'The host cannot start the server now.',
      },
      async handler(ctx) {
        const rec = core.servers.owned(ctx.auth, ctx.params.id);
        await core.servers.restart(rec);
        return { status: 200, body: await core.servers.view(rec, ctx.auth) };
      },
    }),
    route({
      method: 'GET',
      path: '/servers/:id/logs',
      auth: 'bearer',
      summary: "The last lines of /var/log/run.sh.log, the supervisor's events and the OOM kills of a server; never wakes it",
      ...server,
      query: LogsQuery,
      responses: {
        200: { description: 'lines, events (started, exited, restarting, changed, oom_kill) and oom_kills', json: LogsAnswer },
        400: 'tail is not a whole number from 1 to 1000.',
        404: 'No such server of yours.',
      },
      handler: async (ctx) => {
        const rec = core.servers.owned(ctx.auth, ctx.params.id);
        return { status: 200, body: await serverLogs(deps.runtime.get(rec.id)?.rootfs, ctx.query.tail ?? 100) };
      },
    }),
    route({
      method: 'GET',
      path: '/credits',
      auth: 'bearer',
      summary: 'Your credits',
      use: [ipLimit],
      responses: { 200: { description: 'Credits', json: Credits }, 402: envelope },
      async handler(ctx) {
        const credits = await core.freshCredits(ctx.auth);
        core.assertNotExhausted(ctx.auth, base(ctx), { credits });
        return { status: 200, body: credits };
      },
    }),
    route({
      method: 'GET',
      path: '/usage',
      auth: 'bearer',
      summary: 'Your usage ledger, newest first',
      use: [ipLimit],
      query: UsageQuery,
      responses: {
        200: { description: 'A page of ledger entries and next_cursor', json: UsagePage },
        400: 'limit is not a whole number from 1 to 500, or cursor is not a next_cursor.',
      },
      handler: async (ctx) => ({
        status: 200,
        body: await deps.billing.usage(ctx.auth, ctx.query.limit === undefined ? null : String(ctx.query.limit), ctx.query.cursor ?? null),
      }),
    }),
    route({
      method: 'POST',
      path: '/expose',
      auth: 'bearer',
      summary: 'Publish a container TCP port on a public port',
      use: [ipLimit],
      body: ExposeRequest,
      bodyLimit: 4096,
      responses: {
        200: { description: 'The public port', json: ExposedPort },
        403: { description: "The tier's cap of exposed ports per server or per account is reached", json: PortLimitError },
        404: 'No such server of yours.',
        409: 'This port is being exposed by another request.',
        503: 'No public port is free.',
      },
      async handler(ctx) {
        core.servers.owned(ctx.auth, ctx.body.server);
        return { status: 200, body: await core.exposures.expose(ctx.auth, ctx.body.server, ctx.body.port) };
      },
    }),
    route({
      method: 'DELETE',
      path: '/expose',
      auth: 'bearer',
      summary: 'Stop publishing a container TCP port',
      use: [ipLimit],
      body: ExposeRequest,
      bodyLimit: 4096,
      responses: { 200: { description: 'Released', json: Ok }, 404: 'No such server of yours, or the port is not exposed.' },
      async handler(ctx) {
        core.servers.owned(ctx.auth, ctx.body.server);
        await core.exposures.unexpose(ctx.body.server, ctx.body.port);
        return ok;
      },
    }),
    route({
      method: 'POST',
      path: '/account/rotate-key',
      auth: 'bearer',
      summary: 'Replace your api_key; the old one stops working',
      use: [ipLimit],
      responses: { 200: { description: 'The new key', json: RotatedKey } },
      handler: async (ctx) => ({ status: 200, body: { api_key: await core.accounts.rotate(ctx.auth), tier: tierOf(ctx.auth) } }),
    }),
    ...domainRoutes(core, ipLimit),
    ...toolboxRoutes(core, ipLimit, base),
    ...checkpointRoutes(core, ipLimit, base),
  ];
}
