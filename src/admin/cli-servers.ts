// `rootbox servers list|show|stop|start|suspend|resume|delete|checkpoints|restore|move`. list and show answer from the
// daemon, or from the store while it is stopped; the others act in the running daemon at once
// and refuse without it. `list --cluster` (cluster mode) reads every host's placements from the
// registry instead (no daemon needed).

import type { Config } from '../config/index.js';
import { AppError } from '../errors.js';
import { ask, needDaemon, ok, withStore } from './cli-link.js';
import type { CliFlags, CliOut } from './cli-io.js';
import { clusterList } from './cli-placements.js';
import { block, bytes, day, table } from './table.js';
import { accountView, findAccount, findServer, serverView, type ServerView } from './views.js';

const ACTIONS = ['stop', 'start', 'suspend', 'resume'] as const;

function serverTable(servers: ServerView[]): string {
  if (!servers.length) return 'no servers';
  return table(
    ['ID', 'SUBDOMAIN', 'ACCOUNT', 'TIER', 'STATE', 'RAM', 'DISK USED/CEILING', 'FLAGS', 'CREATED'],
    servers.map((s) => [
      s.id,
      s.subdomain,
      s.account,
      s.tier,
      s.state,
      bytes(s.memory_bytes),
      `${bytes(s.disk_used_bytes ?? s.disk_allocated_bytes)}/${bytes(s.disk_bytes)}`,
      [s.suspended ? `suspended(${s.suspended_by})` : '', s.never_sleep ? 'never_sleep' : ''].filter(Boolean).join(',') || null,
      day(s.created_at),
    ]),
  );
}

interface CheckpointView {
  id: string;
  created_at: string;
  size_bytes: number;
  kind: string;
  comment?: string;
}

function checkpointTable(cps: CheckpointView[]): string {
  if (!cps.length) return 'no checkpoints';
  return table(
    ['ID', 'CREATED', 'KIND', 'SIZE', 'COMMENT'],
    cps.map((c) => [c.id, c.created_at, c.kind, bytes(c.size_bytes), c.comment ?? null]),
  );
}

const emit = (io: CliOut, flags: CliFlags, body: unknown, human: () => string) => io.out(flags.json ? JSON.stringify(body, null, 2) : human());

export async function serversCommand(cfg: Readonly<Config>, sub: string | undefined, args: string[], flags: CliFlags, io: CliOut): Promise<number> {
  const dir = cfg.dataDir;
  if (sub === 'list' && args.length === 0 && flags.cluster) return clusterList(cfg, flags, io);
  if (sub === 'list' && args.length === 0) {
    const q = flags.account ? `?account=${encodeURIComponent(flags.account)}` : '';
    const a = await ask(dir, 'GET', `/servers${q}`);
    let body: { servers: ServerView[] };
    if (a) body = ok(a);
    else {
      body = await withStore(cfg, io, (v) => {
        let recs = v.store.servers.all();
        if (flags.account) {
          const acc = findAccount(v.store, cfg.domain, flags.account);
          if (!acc) throw AppError.of('unknown_target', `no account ${flags.account.slice(0, 80)}`);
          recs = v.store.servers.listByAccount(acc.id);
        }
        return { servers: recs.map((s) => serverView(v, s)) };
      });
    }
    emit(io, flags, body, () => serverTable(body.servers));
    return 0;
  }
  if (sub === 'show' && args.length === 1) {
    const a = await ask(dir, 'GET', `/servers/${encodeURIComponent(args[0])}`);
    let body: Record<string, unknown>;
    if (a) body = ok(a);
    else {
      body = await withStore(cfg, io, (v) => {
        const rec = findServer(v.store, cfg.domain, args[0]);
        if (!rec) throw AppError.of('unknown_target', `no server ${args[0].slice(0, 80)}`);
        const acc = v.store.accounts.get(rec.accountId);
        return { server: serverView(v, rec), account: acc ? accountView(v, acc) : null };
      });
    }
    emit(io, flags, body, () => block(body));
    return 0;
  }
  if ((ACTIONS as readonly string[]).includes(sub ?? '') && args.length === 1) {
    const a = await ask(dir, 'POST', `/servers/${encodeURIComponent(args[0])}/${sub}`);
    if (!a) needDaemon(dir, `servers ${sub}`);
    const body = ok<{ server: ServerView; running?: boolean }>(a);
    const s = body.server;
    const note = sub === 'resume' && body.running === false ? ' (still suspended: its account ran out of credit; `rootbox accounts credit` resumes it)' : '';
    emit(io, flags, body, () => `${s.id} (${s.subdomain}): ${s.state}${s.suspended ? ', suspended' : ''}${note}`);
    return 0;
  }
  if (sub === 'delete' && args.length === 1) {
    if (!flags.yes) {
      io.err(`rootbox: \`servers delete ${args[0]}\` removes the server, its disk and its exposed ports for good; repeat with --yes`);
      return 2;
    }
    const a = await ask(dir, 'DELETE', `/servers/${encodeURIComponent(args[0])}`);
    if (!a) needDaemon(dir, 'servers delete');
    const body = ok<{ deleted: string }>(a);
    emit(io, flags, body, () => `deleted ${body.deleted}`);
    return 0;
  }
  if (sub === 'checkpoints' && args.length === 1) {
    const a = await ask(dir, 'GET', `/servers/${encodeURIComponent(args[0])}/checkpoints`);
    if (!a) needDaemon(dir, 'servers checkpoints');
    const body = ok<{ server: string; checkpoints: CheckpointView[] }>(a);
    emit(io, flags, body, () => checkpointTable(body.checkpoints));
    return 0;
  }
  if (sub === 'restore' && args.length === 2) {
    const a = await ask(dir, 'POST', `/servers/${encodeURIComponent(args[0])}/restore`, { checkpoint: args[1] });
    if (!a) needDaemon(dir, 'servers restore');
    const body = ok<{ server: ServerView; checkpoint: CheckpointView }>(a);
    emit(
      io,
      flags,
      body,
      () => `${body.server.id} (${body.server.subdomain}): restored to ${body.checkpoint.id} of ${body.checkpoint.created_at}; ${body.server.state}`,
    );
    return 0;
  }
  if (sub === 'move' && args.length === 1) {
    if (!flags.to) {
      io.err('rootbox: `servers move SERVER --to HOST`: name the host to move it to');
      return 2;
    }
    const a = await ask(dir, 'POST', `/servers/${encodeURIComponent(args[0])}/move`, { to: flags.to });
    if (!a) needDaemon(dir, 'servers move');
    const body = ok<{ move: { server: string; slug: string; from: string; to: string; epoch: number; was: string; held_ms: number; took_ms: number } }>(a);
    const m = body.move;
    emit(
      io,
      flags,
      body,
      () =>
        `${m.server} (${m.slug}): moved from ${m.from} to ${m.to} (epoch ${m.epoch}, ${m.was}); requests waited ${m.held_ms} ms, the move took ${m.took_ms} ms`,
    );
    return 0;
  }
  return -1; // not a servers command: the caller prints the usage
}
