// The routes of servers' own domains (src/domains does the work): attach a domain and get the
// DNS records to create, list a server's domains with their states, check one now, detach one
// (its certificate goes with it). Limits per tier: hosting.domains.limits.

import type { Route, Step } from '../http/index.js';
import { routes } from '../http/index.js';
import type { AccountRecord } from '../store/index.js';
import { tierOf } from './accounts.js';
import type { HostingCore } from './core.js';
import { Domain, DomainLimitError, DomainList, DomainPath, DomainRequest, Ok, ServerPath } from './schemas.js';
import { AppError } from '../errors.js';

export function domainRoutes(core: HostingCore, ipLimit: Step): Route<AccountRecord>[] {
  const route = routes<AccountRecord>();
  const notFound = (p: Record<string, string>) => AppError.of('server_not_found', `you have no server ${String(p.id).slice(0, 40)}`);
  const domains = core.domains;
  return [
    route({
      method: 'POST',
      path: '/servers/:id/domains',
      auth: 'bearer',
      summary: 'Attach a domain of yours to a server: answers the DNS records to create; it is served over HTTPS once they are found',
      description:
        "Create the records listed (a CNAME to the server's <slug>.{domain}, or an A/AAAA record to the public address for a zone apex, and the TXT ownership token). Pending domains are checked on a schedule and by POST …/check; once the records are found a certificate is ordered (HTTP-01) and the domain becomes active.",
      params: ServerPath,
      notFound,
      use: [ipLimit],
      body: DomainRequest,
      bodyLimit: 4096,
      responses: {
        200: { description: 'The domain (state pending_dns, or as it is when already attached to this server) and the records to create', json: Domain },
        400: "Not a host name that can carry a certificate (invalid_domain), or the service's own domain or a name under it (reserved_domain).",
        403: { description: "The account's tier allows no more domains (anonymous accounts none)", json: DomainLimitError },
        404: 'No such server of yours.',
        409: 'The domain is attached to another server: of another account (an unproven claim yields once you publish your own TXT token), or another of yours.',
        503: 'No ACME directory is configured on this host, so custom domains cannot get certificates.',
      },
      async handler(ctx) {
        const rec = core.servers.owned(ctx.auth, ctx.params.id);
        return { status: 200, body: await domains.add({ id: ctx.auth.id, tier: tierOf(ctx.auth) }, rec.id, ctx.body.domain) };
      },
    }),
    route({
      method: 'GET',
      path: '/servers/:id/domains',
      auth: 'bearer',
      summary: "A server's own domains and their states (pending_dns, issuing, active, failed with the reason)",
      params: ServerPath,
      notFound,
      use: [ipLimit],
      responses: { 200: { description: 'The domains, oldest first', json: DomainList }, 404: 'No such server of yours.' },
      handler(ctx) {
        const rec = core.servers.owned(ctx.auth, ctx.params.id);
        return { status: 200, body: { domains: domains.list(rec.id) } };
      },
    }),
    route({
      method: 'POST',
      path: '/servers/:id/domains/:domain/check',
      auth: 'bearer',
      summary: "Check a pending (or failed) domain's records now; once found, its certificate is ordered",
      params: DomainPath,
      notFound,
      use: [ipLimit],
      responses: {
        200: { description: 'The domain after the check (issuing while its certificate is ordered: read it again with GET)', json: Domain },
        404: 'No such server of yours, or the server has no such domain.',
        429: 'The domain used its certificate orders of this hour (hosting.domains.attemptsPerHour; see Retry-After).',
      },
      async handler(ctx) {
        const rec = core.servers.owned(ctx.auth, ctx.params.id);
        return { status: 200, body: await domains.checkNow(domains.owned(rec.id, ctx.params.domain)) };
      },
    }),
    route({
      method: 'DELETE',
      path: '/servers/:id/domains/:domain',
      auth: 'bearer',
      summary: 'Detach a domain from a server: it stops being served and its certificate is deleted',
      params: DomainPath,
      notFound,
      use: [ipLimit],
      responses: { 200: { description: 'Detached', json: Ok }, 404: 'No such server of yours, or the server has no such domain.' },
      async handler(ctx) {
        const rec = core.servers.owned(ctx.auth, ctx.params.id);
        await domains.remove(domains.owned(rec.id, ctx.params.domain));
        return { status: 200, body: { ok: true } };
      },
    }),
  ];
}
