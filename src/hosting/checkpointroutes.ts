// The checkpoint routes (issue 37): take one, list them, delete one, restore one, fork a server
// from one. Declared once here like every route (the OpenAPI document and the MCP tools come from
// these declarations); the work is ServerCheckpoints' (checkpoints.ts), reached through the core.

import { z } from 'zod';
import { AppError } from '../errors.js';
import { routes, type BaseCtx, type Route, type Step } from '../http/index.js';
import type { AccountRecord, CheckpointRecord } from '../store/index.js';
import type { HostingCore } from './core.js';
import {
  CheckpointList,
  CheckpointObject,
  CheckpointRequest,
  CreateResponse,
  ForkRequest,
  Ok,
  RestoreRequest,
  ServerPath,
  UpgradeEnvelope,
} from './schemas.js';
import type { Created } from './servers.js';

const CheckpointPath = ServerPath.extend({ cid: z.string().max(64).describe('Checkpoint id.') });

const envelope = {
  description: 'The account used up its free grant and has no credit (the upgrade envelope), or the server is suspended',
  json: UpgradeEnvelope,
};
const storeAway = 'The checkpoint store cannot be reached (store_unavailable, see Retry-After), or checkpoints are not available on this host.';
const MEMORY =
  " It holds the server's disk (what it wrote over its base image) and its settings, taken crash-consistent with its filesystem frozen for milliseconds while its processes keep running; memory is not kept.";

export const checkpointView = (r: CheckpointRecord) => ({
  id: r.id,
  server_id: r.serverId,
  created_at: new Date(r.createdAt).toISOString(),
  size_bytes: r.sizeBytes,
  kind: r.kind,
  ...(r.comment ? { comment: r.comment } : {}),
});

export function checkpointRoutes(core: HostingCore, ipLimit: Step, base: (ctx: BaseCtx) => string): Route<AccountRecord>[] {
  const route = routes<AccountRecord>();
  const notFound = (p: Record<string, string>) => new AppError('not_found', 'server_not_found', `you have no server ${String(p.id).slice(0, 40)}`);
  const server = { params: ServerPath, notFound, use: [ipLimit] };
  const cps = () => {
    if (!core.checkpoints?.engine.available) throw AppError.of('not_configured', 'checkpoints are not available on this host');
    return core.checkpoints;
  };
  /** The caller's server (404 for anyone else's), once the grant check passed. */
  const owned = (ctx: BaseCtx & { auth: AccountRecord; params: { id: string } }) => {
    const rec = core.servers.owned(ctx.auth, ctx.params.id);
    core.assertNotExhausted(ctx.auth, base(ctx));
    return rec;
  };
  return [
    route({
      method: 'POST',
      path: '/servers/:id/checkpoints',
      auth: 'bearer',
      summary: 'Checkpoint the server now: a point-in-time copy of its disk and settings to restore or fork from later',
      description: `A sleeping server is checkpointed without a wake; a running one keeps running.${MEMORY} Only what changed since earlier checkpoints is stored.`,
      ...server,
      body: CheckpointRequest.optional(),
      bodyLimit: 4096,
      responses: {
        201: { description: 'The checkpoint', json: CheckpointObject },
        402: envelope,
        404: 'No such server of yours.',
        429: "The server holds its tier's maximum of manual checkpoints (checkpoint_limit): delete one to take another.",
        503: storeAway,
      },
      async handler(ctx) {
        const rec = owned(ctx);
        const r = await cps().take(rec, ctx.auth, 'manual', ctx.body?.comment);
        return { status: 201, body: checkpointView(r) };
      },
    }),
    route({
      method: 'GET',
      path: '/servers/:id/checkpoints',
      auth: 'bearer',
      summary: "List the server's checkpoints, newest first (manual ones and automatic ones)",
      ...server,
      responses: { 200: { description: 'Checkpoints', json: CheckpointList }, 402: envelope, 404: 'No such server of yours.' },
      handler(ctx) {
        const rec = owned(ctx);
        return { status: 200, body: { checkpoints: (core.checkpoints?.list(rec) ?? []).map(checkpointView) } };
      },
    }),
    route({
      method: 'DELETE',
      path: '/servers/:id/checkpoints/:cid',
      auth: 'bearer',
      summary: 'Delete a checkpoint (what no other checkpoint shares is freed)',
      params: CheckpointPath,
      notFound,
      use: [ipLimit],
      responses: { 200: { description: 'Deleted', json: Ok }, 402: envelope, 404: 'No such server of yours, or no such checkpoint of it.', 503: storeAway },
      async handler(ctx) {
        const rec = owned(ctx);
        core.checkpoints?.owned(rec, ctx.params.cid);
        await cps().remove(rec, ctx.params.cid);
        return { status: 200, body: { ok: true } };
      },
    }),
    route({
      method: 'POST',
      path: '/servers/:id/restore',
      auth: 'bearer',
      summary: "Make the server's disk that of one of its checkpoints (it restarts; a running app comes back)",
      description:
        'Every piece of the checkpoint is verified before anything changes: a missing or damaged one refuses the restore (502 checkpoint_corrupt) and the server keeps its disk. Files written since the checkpoint are lost; memory is not restored (processes start anew). A sleeping server stays asleep.',
      ...server,
      body: RestoreRequest,
      bodyLimit: 4096,
      responses: {
        200: { description: 'Restored: the checkpoint the disk now is', json: z.object({ ok: z.literal(true), checkpoint: CheckpointObject }) },
        402: envelope,
        404: 'No such server of yours, or no such checkpoint of it.',
        409: 'A restore of this server is under way (restore_in_progress): retry once it has answered.',
        502: 'A piece of the checkpoint is missing or damaged in the store (checkpoint_corrupt): nothing changed.',
        503: storeAway,
        507: 'The host has no room for the restored disk (restore_no_room): nothing changed.',
      },
      async handler(ctx) {
        const rec = owned(ctx);
        if (rec.suspended) throw AppError.of('suspended', 'this server is suspended until credit is added');
        core.checkpoints?.owned(rec, ctx.body.checkpoint);
        const r = await cps().restore(rec, ctx.body.checkpoint);
        return { status: 200, body: { ok: true, checkpoint: checkpointView(r) } };
      },
    }),
    route({
      method: 'POST',
      path: '/servers/:id/fork',
      auth: 'bearer',
      summary: 'Make a new server of yours from a checkpoint of this one (default: one taken now), answered like POST /create',
      description:
        "The new server has its own id, subdomain and SSH key pair, and its disk is the checkpoint's: the two are independent from then on. It starts at once (an app under /root/run.sh comes up). The limits of POST /create apply.",
      ...server,
      body: ForkRequest.optional(),
      bodyLimit: 4096,
      responses: {
        201: { description: 'The new server, with its SSH private key (shown only now)', json: CreateResponse },
        402: envelope,
        403: 'A limit: servers per account, or anonymous servers per address.',
        404: 'No such server of yours, or no such checkpoint of it.',
        429: "Without `checkpoint`: the server holds its tier's maximum of manual checkpoints (checkpoint_limit), so none can be taken for the fork.",
        502: 'A piece of the checkpoint is missing or damaged in the store (checkpoint_corrupt): no server was made.',
        503: `${storeAway} Or the host is at capacity or could not create the server.`,
      },
      async handler(ctx) {
        const src = owned(ctx);
        if (ctx.body?.checkpoint !== undefined) core.checkpoints?.owned(src, ctx.body.checkpoint);
        const c = cps();
        const m = await c.forkSource(src, ctx.auth, ctx.body?.checkpoint);
        let created: Created | undefined = await core.servers.create(ctx.auth, {
          subdomains: ctx.body?.slug ? [ctx.body.slug] : undefined,
          fromDisk: { fill: (path) => c.engine.materialize(m, path), image: m.settings.image || undefined, uidBase: m.uidBase, fork: true },
        });
        try {
          const view = await core.servers.view(created.record, ctx.auth);
          const body = {
            ...view,
            ssh: `ssh -i ~/.ssh/${created.record.id} root@${core.cfg.public.sshHost ?? core.cfg.publicIp} -p ${core.sshPort()}`,
            ssh_private_key: created.privateKey,
            ...(created.subdomainNote ? { subdomain_note: created.subdomainNote } : {}),
          };
          await core.servers.commit(created);
          created = undefined;
          core.hostChoice?.changed();
          return { status: 201, body };
        } finally {
          if (created) await core.servers.abandon(created.record.id);
        }
      },
    }),
  ];
}
