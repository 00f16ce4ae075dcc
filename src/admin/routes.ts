// What the admin channel answers: one route per operator command of bin/rootbox.
//   GET    /status                      → status.ts (daemon, parts, store, servers by state, host, certificate, config, registry)
//   GET    /servers[?account=]          → {servers: [ServerView]}
//   GET    /servers/:ref                → {server, account}          (ref: srv_ id, slug or subdomain)
//   POST   /servers/:ref/{stop,start,suspend,resume} → {server, …}
//   DELETE /servers/:ref                → {ok, deleted}
//   GET    /servers/:ref/checkpoints    → {server, checkpoints: [Checkpoint]} (newest first)
//   POST   /servers/:ref/restore {checkpoint} → {ok, server, checkpoint} (the disk becomes the checkpoint's)
//   POST   /servers/:ref/move {to}     → {ok, move: MoveReport} (cluster mode: the server moved to host `to`)
//   GET    /cluster/channel             → {host, channel, peers: [PeerHealth]} (cluster mode; channel false without one)
//   POST   /cluster/recover {host, force?} → {ok, recovery: RecoveryReport} (a dead host's servers re-placed from their checkpoints)
//   GET    /accounts                    → {accounts: [AccountView]}
//   GET    /accounts/:ref               → {account, servers, ledger} (ref: acc_ id or one of its servers)
//   POST   /accounts/:ref/rotate-key    → {account, api_key}
//   POST   /accounts/:ref/revoke        → {account, revoked}
//   POST   /credit {target, usd, source} → credit through Billing (resumes servers suspended by
//          billing and applies the new tier's ceilings to running servers before answering)

import { z } from 'zod';
import { AppError } from '../errors.js';
import { resolveCredit, ADMIN_SOURCE_RE } from '../billing/index.js';
import { Router, routes, type Route } from '../http/index.js';
import { checkpointView, tierOf } from '../hosting/index.js';
import { adminSocketPath } from './server.js';
import { AdminActions, type AdminDeps } from './actions.js';
import { paymentsPart, registryPart, statusView } from './status.js';
import { accountView, ledgerView, serverView } from './views.js';

const CreditBody = z
  .object({
    target: z.string().min(1).max(80),
    usd: z.string().min(1).max(40),
    source: z.string().regex(ADMIN_SOURCE_RE, 'must be admin:<uuid>'),
  })
  .strict();

const Ref = z.object({ ref: z.string().min(1).max(255) });
const RestoreBody = z.object({ checkpoint: z.string().min(1).max(64) }).strict();
const MoveBody = z.object({ to: z.string().min(1).max(255) }).strict();
const RecoverBody = z.object({ host: z.string().min(1).max(255), force: z.boolean().optional() }).strict();
const ServersQuery = z.object({ account: z.string().max(80).optional() });
const unknown = 'No such server or account.';

function serverRoutes(a: AdminActions, d: AdminDeps): Route[] {
  const route = routes();
  const view = (id: string) => serverView(a.views, a.server(id));
  const act = (verb: 'stop' | 'start' | 'suspend' | 'resume', summary: string) =>
    route({
      method: 'POST',
      path: `/servers/:ref/${verb}`,
      auth: 'none',
      summary,
      params: Ref,
      responses: { 200: { description: 'Done; the server as it is now' }, 402: 'Suspended (start).', 404: unknown },
      async handler({ params }) {
        const rec = a.server(params.ref);
        const running = await a[verb](rec);
        return { status: 200, body: { server: view(rec.id), ...(verb === 'resume' ? { running } : {}) } };
      },
    });
  return [
    route({
      method: 'GET',
      path: '/servers',
      auth: 'none',
      summary: 'Every server (or those of one account)',
      query: ServersQuery,
      responses: { 200: { description: 'Servers' }, 404: unknown },
      async handler({ query }) {
        const recs = query.account ? a.views.store.servers.listByAccount((await a.account(query.account)).id) : a.views.store.servers.all();
        return { status: 200, body: { servers: recs.map((s) => serverView(a.views, s)) } };
      },
    }),
    route({
      method: 'GET',
      path: '/servers/:ref',
      auth: 'none',
      summary: 'One server and its account',
      params: Ref,
      responses: { 200: { description: 'The server' }, 404: unknown },
      handler({ params }) {
        const rec = a.server(params.ref);
        const acc = a.views.store.accounts.get(rec.accountId);
        return { status: 200, body: { server: serverView(a.views, rec), account: acc ? accountView(a.views, acc) : null } };
      },
    }),
    act('stop', 'Put a server to sleep now'),
    act('start', 'Wake a server'),
    act('suspend', 'Suspend a server (stopped; its subdomain answers 402) until resumed'),
    act('resume', 'End an operator suspension and start the server'),
    route({
      method: 'DELETE',
      path: '/servers/:ref',
      auth: 'none',
      summary: 'Delete a server and free everything it held',
      params: Ref,
      responses: { 200: { description: 'Deleted' }, 404: unknown },
      async handler({ params }) {
        const rec = a.server(params.ref);
        await a.delete(rec);
        return { status: 200, body: { ok: true, deleted: rec.id } };
      },
    }),
    route({
      method: 'GET',
      path: '/servers/:ref/checkpoints',
      auth: 'none',
      summary: "A server's checkpoints, newest first",
      params: Ref,
      responses: { 200: { description: 'Checkpoints' }, 404: unknown },
      handler({ params }) {
        const rec = a.server(params.ref);
        return { status: 200, body: { server: rec.id, checkpoints: a.checkpoints().list(rec).map(checkpointView) } };
      },
    }),
    route({
      method: 'POST',
      path: '/servers/:ref/restore',
      auth: 'none',
      summary: "Make a server's disk that of one of its checkpoints (it restarts when it was running)",
      params: Ref,
      body: RestoreBody,
      bodyLimit: 4096,
      responses: {
        200: { description: 'Restored' },
        404: 'No such server, or no such checkpoint of it.',
        502: 'The checkpoint is damaged.',
        503: 'The store is away.',
      },
      async handler({ params, body }) {
        const rec = a.server(params.ref);
        const r = await a.checkpoints().restore(rec, body.checkpoint);
        return { status: 200, body: { ok: true, server: view(rec.id), checkpoint: checkpointView(r) } };
      },
    }),
    route({
      method: 'POST',
      path: '/servers/:ref/move',
      auth: 'none',
      summary: 'Move a server of this host to another host of the cluster (a checkpoint in the shared store, a restore there)',
      params: Ref,
      body: MoveBody,
      bodyLimit: 4096,
      responses: {
        200: { description: 'Moved: the target runs it (the report: epoch, what it was, how long requests waited, its new ports)' },
        400: 'The target is this host (move_to_self).',
        404: 'No such server, or no such host (move_target_unknown).',
        409: 'The target is full, the store is no shared one, the server is moving already or runs on another host (move_not_here, naming it), or the target refused it for a reason another try does not change (move_refused).',
        503: 'The target is down, or the move failed: the server stays here, serving.',
      },
      async handler({ params, body }) {
        if (!d.moves) throw AppError.of('not_configured', 'this daemon moves no servers');
        let rec;
        try {
          rec = a.server(params.ref);
        } catch (e) {
          // another host's server: say which one runs it
          const host = await d.moves.placedOn(params.ref).catch(() => undefined);
          if (host) throw AppError.of('move_not_here', `server ${params.ref} runs on ${host}: run \`rootbox servers move\` there`);
          throw e;
        }
        return { status: 200, body: { ok: true, move: await d.moves.move(rec, body.to) } };
      },
    }),
  ];
}

function accountRoutes(a: AdminActions, d: AdminDeps): Route[] {
  const route = routes();
  return [
    route({
      method: 'GET',
      path: '/accounts',
      auth: 'none',
      summary: 'Every account',
      responses: { 200: { description: 'Accounts' } },
      handler: async () => ({ status: 200, body: { accounts: (await d.hosting.core.accounts.book.all()).map((x) => accountView(a.views, x)) } }),
    }),
    route({
      method: 'GET',
      path: '/accounts/:ref',
      auth: 'none',
      summary: 'One account, its servers and its recent ledger',
      params: Ref,
      responses: { 200: { description: 'The account' }, 404: unknown },
      async handler({ params }) {
        const acc = await a.account(params.ref);
        const recent = await d.billing.book.entries(acc.id, 20); // cluster mode: every host's entries
        return {
          status: 200,
          body: {
            account: accountView(a.views, acc),
            servers: d.store.servers.listByAccount(acc.id).map((s) => serverView(a.views, s)),
            ledger: ledgerView(d.store, acc.id, 20, recent.items),
          },
        };
      },
    }),
    route({
      method: 'POST',
      path: '/accounts/:ref/rotate-key',
      auth: 'none',
      summary: "Replace the account's api_key (the old one answers 401 revoked_api_key)",
      params: Ref,
      responses: { 200: { description: 'The new api_key' }, 404: unknown },
      async handler({ params }) {
        const acc = await a.account(params.ref);
        return { status: 200, body: { account: acc.id, api_key: await a.rotateKey(acc) } };
      },
    }),
    route({
      method: 'POST',
      path: '/accounts/:ref/revoke',
      auth: 'none',
      summary: "Revoke the account's api_key without handing out a new one",
      params: Ref,
      responses: { 200: { description: 'Revoked' }, 404: unknown },
      async handler({ params }) {
        const acc = await a.account(params.ref);
        await a.revoke(acc);
        return { status: 200, body: { account: acc.id, revoked: true } };
      },
    }),
    route({
      method: 'POST',
      path: '/credit',
      auth: 'none',
      summary: 'Credit an account through Billing',
      body: CreditBody,
      bodyLimit: 4096,
      responses: { 200: { description: 'Credited (or already credited from this source)' }, 404: unknown },
      async handler({ body }) {
        const { accountId, usd } = resolveCredit(d.store, body.target, body.usd);
        await d.billing.book.ready(); // cluster mode: 503 registry_unavailable before anything is queued
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
  ];
}

export function adminRouter(d: AdminDeps): Router {
  const started = Date.now();
  const a = new AdminActions(d);
  const route = routes();
  return new Router(d.log).add(
    route({
      method: 'GET',
      path: '/status',
      auth: 'none',
      summary: 'The daemon, its parts, the store, servers by state, host headroom, certificate and configuration',
      responses: { 200: { description: 'Status' } },
      handler: async () => {
        const registry = await d.registry?.report();
        return {
          status: 200,
          body: statusView(
            { ...a.views, cfg: d.cfg },
            {
              running: true,
              pid: process.pid,
              node: process.version,
              uptime_s: Math.round((Date.now() - started) / 1000),
              parts: {
                store: { up: true },
                runtime: { up: true },
                billing: { up: true, meter_interval_ms: d.cfg.billing.meterInterval },
                edge: { up: true, http_port: d.edge.ports.http, https_port: d.edge.ports.https },
                ssh: { up: true, port: d.ssh.port },
                admin: { up: true, socket: adminSocketPath(d.cfg.dataDir) },
                ...(d.payments && { payments: paymentsPart(d.cfg, d.payments.health.view) }),
                ...(registry && { registry: registryPart(registry) }),
              },
            },
            registry,
          ),
        };
      },
    }),
    route({
      method: 'GET',
      path: '/cluster/channel',
      auth: 'none',
      summary: "This host's channel sessions to its peers: up or down, errors, forwarded requests",
      responses: { 200: { description: 'Channel health' } },
      handler: () => ({ status: 200, body: { host: d.registry?.host ?? null, channel: !!d.channel, peers: d.channel?.health() ?? [] } }),
    }),
    route({
      method: 'POST',
      path: '/cluster/recover',
      auth: 'none',
      summary: "Recover a dead host's servers on the other hosts from their newest checkpoints (the operator's word, even with cluster.recoverAfter 0)",
      body: RecoverBody,
      bodyLimit: 1024,
      responses: {
        200: { description: 'What was recovered where, what could not be (no checkpoint) and what failed' },
        404: 'No such other host (recover_host_unknown).',
        409: "The host's lease still runs (recover_host_live), a peer reached it over the channel a moment ago (recover_host_reached), cluster.recoverAfter is 0 and `force` was not given (recover_needs_force), another recovery is under way (recovery_busy), or the store is no shared one.",
      },
      async handler({ body }) {
        if (!d.moves?.recover) throw AppError.of('not_configured', 'this daemon recovers no servers (cluster mode only)');
        return { status: 200, body: { ok: true, recovery: await d.moves.recover(body.host, { force: body.force === true }) } };
      },
    }),
    ...serverRoutes(a, d),
    ...accountRoutes(a, d),
  );
}
