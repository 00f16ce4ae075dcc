// The target's side of a move (issue 38 item 1): the source asks over the channel (ADOPT_PATH,
// answered only for a peer host, never for a client), and this host
//   1. checks it has room for the server's ceilings (409 move_target_full otherwise);
//   2. writes the server record pending as a `move` (invisible; the epoch the source read and
//      what it takes over — checkpoint records, domains, exposed ports, whether it ran — kept
//      with it, store/servers.ts MoveTakeover) with the runtime's reservation, and makes the
//      server from the checkpoint the source named (every chunk verified on the way, its files
//      moved to this host's uid range, as a fork does), asleep: nothing of it runs before it is
//      this host's;
//   3. takes the placement from the epoch the source read (compare-and-set: one more then) with
//      the slug's claim, while the source's run that asked still holds its name (a source that
//      restarted meanwhile kept the server) — a registry that moved on undoes 2 and refuses; an error whose outcome
//      is unknown (the connection dropped after COMMIT was sent) is resolved by reading the
//      placement again: here at the epoch after the source's, it is this host's; a registry
//      that cannot be read leaves the record pending, resolved later (takeover.ts), never undone
//      while the registry may name this host;
//   4. opens the server's meter at the instant the source charged it up to (a recovery: now),
//      commits the record (checked: a move has no deadline, the registry decided) and finishes
//      the takeover (takeover.ts: records its SSH key, keeps the checkpoint records, routes its
//      own domains, exposes the container ports again, starts it through the start guard if it
//      ran on the source) — a crash from the commit on finishes it at the next start; then
//      answers (the source deletes its copy on that).
// Nothing the shared store holds is removed here, whatever fails: the checkpoints stay the server's.

import { AppError } from '../errors.js';
import { readBody, type Req } from '../http/index.js';
import type { Logger } from '../log/index.js';
import type { MoveTakeover, ServerRecord } from '../store/index.js';
import { forgetCopy } from './asked.js';
import { killPoint } from './killpoint.js';
import { roomShort } from './prepare.js';
import type { Staging } from './staging.js';
import { APP_WAIT_MS, commitMove, finishTakeover, resumeMoves, specOf, takenHere } from './takeover.js';
import type { MovesDeps } from './types.js';
import { ADOPT_MAX_BYTES, AdoptRequest, type AdoptAnswer } from './wire.js';

/** Reads and checks the source's request. */
export async function adoptRequestOf(req: Req): Promise<AdoptRequest> {
  const raw = await readBody(req, ADOPT_MAX_BYTES);
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    throw AppError.of('invalid_json', 'a move request that is not JSON');
  }
  const r = AdoptRequest.safeParse(parsed);
  if (!r.success) throw AppError.of('invalid_request', `a move request this host does not read: ${r.error.issues[0]?.message ?? 'invalid'}`);
  return r.data;
}

/** Makes the server the source sent on this host, placed here; its answer tells the source to delete its copy. */
export async function adopt(d: MovesDeps, log: Logger, a: AdoptRequest, from: string, staging?: Staging): Promise<AdoptAnswer> {
  const r = d.registry;
  const core = d.hosting.core;
  const cps = core.checkpoints;
  if (!r || !cps?.engine.available) throw AppError.of('not_configured', 'this host takes no moved servers (no registry or no checkpoints)');
  const s = a.server;
  if (d.store.servers.getAny(s.id)?.pending?.op === 'move') {
    // an earlier move of it a crash left pending here, its placement not read since (the registry
    // away at the restart): resolved now — removed, as it is placed elsewhere — else tried again later
    await resumeMoves(d, log);
    if (d.store.servers.getAny(s.id))
      throw AppError.of('move_failed', `${r.host} has an earlier move of server ${s.id} not resolved yet: try again shortly`, { retryAfter: 10 });
  }
  if (d.store.servers.getAny(s.id)) throw AppError.of('server_exists', `${r.host} has server ${s.id} already`);
  if (r.asked.has(s.id)) {
    // an earlier move of it off this host whose outcome is known (the source sends it here) but
    // whose copy was not all removed: what is left goes now, then the stale mark (which would
    // refuse its starts here while the registry is away, and any move of it)
    await forgetCopy(d, s.id).catch((e: unknown) => {
      throw AppError.of('move_failed', `${r.host} could not remove what an earlier move of server ${s.id} left here`, { cause: e, retryAfter: 10 });
    });
    r.asked.clear(s.id);
    log.info('the mark of an earlier move of a server moved back here cleared', { server: s.id });
  }
  const short = roomShort(d, staging, s);
  if (short) throw AppError.of('move_target_full', `${r.host} ${short}`);
  const account = await core.accounts.book.byId(s.accountId);
  if (!account) throw AppError.of('move_failed', `${r.host} does not find the account ${s.accountId} in the registry`);
  const m = await cps.engine.get(s.id, a.checkpoint);
  const servers = core.servers;
  const takeover: MoveTakeover = {
    from,
    checkpoint: a.checkpoint,
    running: a.running,
    exposed: a.exposed,
    checkpoints: a.checkpoints,
    domains: a.domains,
    ...(a.note ? { note: a.note } : {}),
    ...(a.meteredTo !== undefined ? { meteredTo: a.meteredTo } : {}),
  };
  const record: ServerRecord = { ...s, pending: { ...servers.pending.mark('move'), expected: a.epoch }, takeover };
  // prestaged (prepare.ts): the staged image of `base` patched to this checkpoint's, else made whole
  const base = a.base;
  const fill =
    base && staging
      ? async (path: string) => {
          const t0 = Date.now();
          const r = await staging.take(s.id, base, m, path).catch((err: unknown) => {
            log.warn('a moved server’s staged image was not used: made whole from its checkpoint', { server: s.id, base, err });
            return undefined;
          });
          if (r) log.info('a moved server’s staged image patched', { server: s.id, base, checkpoint: m.id, ...r, ms: Date.now() - t0 });
          else await cps.engine.materialize(m, path);
        }
      : undefined;
  const { spec, fromDisk } = specOf(d, record, m, fill);
  const inserted = d.store.atomically(() => {
    if (!d.store.servers.insert(record)) return false;
    d.runtime.reserve?.({ ...spec, fromDisk });
    return true;
  });
  if (!inserted) throw AppError.of('server_exists', `${r.host} has server ${s.id}'s subdomain ${s.slug} in use already`);
  servers.pending.begin(s.id);
  log.info('taking a server moved here', { server: s.id, slug: s.slug, from, checkpoint: a.checkpoint, running: a.running });
  const undo = async (e: unknown, why: string) => {
    servers.pending.end(s.id);
    await servers.abandon(s.id);
    log.warn(why, { server: s.id, from, err: e });
    return e instanceof AppError ? e : AppError.of('move_failed', `${r.host} could not make the server from its checkpoint`, { cause: e });
  };
  try {
    // made asleep: it runs here only once it is this host's (a source still serving, or another
    // recoverer that wins, never meets a second running copy)
    await d.runtime.create({ ...spec, net: servers.netOf(account), fromDisk, start: false });
  } catch (e) {
    throw await undo(e, 'a moved server was not made here; the source keeps it');
  }
  // a sleeping one: its disk as restored is its checkpoint's, by this host's clock (a record
  // without it would have every moved server checkpointed again at the first interval)
  const restoredAt = a.running ? undefined : await d.runtime.settledDiskAt?.(s.id).catch(() => undefined);
  let epoch: number;
  try {
    // the compare-and-set: from the epoch the source read, or nothing (the source keeps serving)
    epoch = await r.names.moveHere(s.id, s.slug, d.cfg.publicIp, a.epoch, a.run);
  } catch (e) {
    // the write may have committed though an error came back: the placement says whose it is
    let taken: number | undefined | 'unknown';
    try {
      taken = await takenHere(d, s.id, a.epoch);
    } catch {
      taken = 'unknown';
    }
    if (taken === undefined) throw await undo(e, 'a moved server was not taken; the source keeps it');
    if (taken === 'unknown') {
      servers.pending.end(s.id);
      log.warn('whether a moved server was taken here is not known (the registry cannot be read): kept pending, resolved once it answers', {
        server: s.id,
        from,
        err: e,
      });
      throw AppError.of('move_failed', `${r.host} cannot tell whether it took server ${s.id}: the registry cannot be read`, { retryAfter: 30 });
    }
    log.warn('the placement was taken though its write reported an error', { server: s.id, epoch: taken, err: e });
    epoch = taken;
  }
  killPoint('move-taken');
  try {
    // metered here from where the source stopped (before the commit: no pass sees it without)
    d.billing?.takeOver(s.id, a.meteredTo);
    commitMove(d, s.id);
    killPoint('move-committed');
    // from here on the server is this host's: its takeover is finished here, or at the next start
    await finishTakeover(d, log, s.id, m.settings.runSh ? APP_WAIT_MS : 0, restoredAt);
  } finally {
    servers.pending.end(s.id); // in flight until then: a round of resumeMoves leaves it alone
  }
  // this host's owner check reads the placement cache: caught up before the source hands requests over
  await r.placements.sync().catch(() => {});
  log.info('server moved here', { server: s.id, slug: s.slug, from, epoch });
  return { epoch, exposed_ports: core.exposures.list(s.id), state: d.presence.state(s.id) ?? d.runtime.get(s.id)?.state ?? 'failed' };
}
