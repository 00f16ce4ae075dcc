// What the admin channel answers. Each route is one operator command of bin/rootbox; later
// commands (servers, accounts, status) add routes here and reuse the channel.
//   GET  /status  → the daemon's pid, uptime and how many accounts and servers it holds
//   POST /credit  {target, usd, source} → credit through Billing (resumes suspended servers and
//                 applies the new tier's ceilings to running servers before answering)

import { z } from 'zod';
import { resolveCredit, ADMIN_SOURCE_RE, type Billing } from '../billing/index.js';
import { Router, routes } from '../http/index.js';
import { tierOf } from '../hosting/index.js';
import type { Logger } from '../log/index.js';
import type { Store } from '../store/index.js';

export interface AdminDeps {
  store: Store;
  billing: Billing;
  log: Logger;
}

const CreditBody = z
  .object({
    target: z.string().min(1).max(80),
    usd: z.string().min(1).max(40),
    source: z.string().regex(ADMIN_SOURCE_RE, 'must be admin:<uuid>'),
  })
  .strict();

const Status = z.object({
  ok: z.literal(true),
  pid: z.number().int(),
  uptime_s: z.number().int().min(0),
  accounts: z.number().int().min(0),
  servers: z.number().int().min(0),
});

export function adminRouter(d: AdminDeps): Router {
  const started = Date.now();
  const route = routes();
  return new Router(d.log).add(
    route({
      method: 'GET',
      path: '/status',
      auth: 'none',
      summary: "The daemon's pid, uptime and how many accounts and servers it holds",
      responses: { 200: { description: 'Status', json: Status } },
      handler: () => ({
        status: 200,
        body: {
          ok: true,
          pid: process.pid,
          uptime_s: Math.round((Date.now() - started) / 1000),
          accounts: d.store.accounts.all().length,
          servers: d.store.servers.all().length,
        },
      }),
    }),
    route({
      method: 'POST',
      path: '/credit',
      auth: 'none',
      summary: 'Credit an account through Billing',
      body: CreditBody,
      bodyLimit: 4096,
      responses: { 200: { description: 'Credited (or already credited from this source)' }, 404: 'No such account or server.' },
      async handler({ body }) {
        const { accountId, usd } = resolveCredit(d.store, body.target, body.usd);
        const credited = await d.billing.credit(accountId, usd, body.source);
        const account = d.store.accounts.get(accountId)!;
        d.log.info('admin credit', { account: accountId, usd, credited });
        return {
          status: 200,
          body: {
            ok: true,
            credited,
            account: accountId,
            usd,
            balance_usd: account.balanceUsd,
            tier: tierOf(account),
            servers: d.store.servers
              .listByAccount(accountId)
              .map((s) => ({ id: s.id, memory_bytes: s.memoryBytes, disk_bytes: s.diskBytes, suspended: s.suspended })),
          },
        };
      },
    }),
  );
}
