// The target's side of a move after its placement write (target.ts), and what a restart or a
// later round resolves of it (issue 38, the kill -9 and lost-answer cases):
//   - a server handed over here is recorded pending as a `move` with the epoch its source read;
//     only the registry's placement decides what becomes of it: placed here by this instance at
//     a later epoch, it is this host's — committed, made again from its checkpoint when a crash
//     took its disk (the runtime's start tears down a pending server's disk) —; placed anywhere
//     else, or deleted, it is removed; a registry that cannot be read leaves it pending, tried
//     again every round (a restart never drops it: the registry may name this host already);
//   - what it takes over (its checkpoint records, own domains, SSH key, exposed ports, a
//     recovery's note, a start if it ran on the source) is kept with its record (MoveTakeover)
//     through the commit and cleared once done: a crash in between finishes it at the next round.

import { connect } from 'node:net';
import type { Manifest } from '../checkpoints/index.js';
import { pause, systemClock } from '../clock.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { ServerSpec } from '../runtime/index.js';
import type { ServerRecord } from '../store/index.js';
import { noteTo } from './note.js';
import type { MovesDeps } from './types.js';

/** How long a running server's app may take to listen again on the target before the source is answered. */
export const APP_WAIT_MS = 15_000;

/** Resolves once something accepts on port 80 of the server, or after `ms` (an app that listens elsewhere). */
async function appUp(d: MovesDeps, id: string, ms: number): Promise<boolean> {
  const ip = d.runtime.get(id)?.ip;
  if (!ip) return false;
  const clock = d.clock ?? systemClock;
  const until = clock.now() + ms;
  while (clock.now() < until) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect({ host: ip, port: 80 });
      const done = (v: boolean) => (s.destroy(), resolve(v));
      s.setTimeout(500, () => done(false));
      s.once('connect', () => done(true));
      s.once('error', () => done(false));
    });
    if (ok) return true;
    await pause(clock, 50);
  }
  return false;
}

/** What the runtime is given to make a moved server from checkpoint `m` (its image written by
 *  `fill` when given — a prestaged one patched —, else materialized whole). */
export function specOf(
  d: MovesDeps,
  rec: ServerRecord,
  m: Manifest,
  fill?: (path: string) => Promise<void>,
): { spec: ServerSpec; fromDisk: NonNullable<ServerSpec['fromDisk']> } {
  const cps = d.hosting.core.checkpoints!;
  const fromDisk = { fill: fill ?? ((path: string) => cps.engine.materialize(m, path)), image: m.settings.image || undefined, uidBase: m.uidBase };
  return { spec: { id: rec.id, slug: rec.slug, memoryBytes: rec.memoryBytes, diskBytes: rec.diskBytes, pendingUntil: rec.pending?.until }, fromDisk };
}

/** The placement's epoch when the registry places server `id` on this host, written by this
 *  instance, at an epoch above the one the source read; undefined when it does not (elsewhere,
 *  lost, deleted, unknown). Throws when the registry cannot be read. */
export async function takenHere(d: MovesDeps, id: string, expected: number): Promise<number | undefined> {
  const r = d.registry!;
  const p = await r.names.fenceOf(id);
  return p && p !== 'deleted' && p.host === r.host && p.mine && !p.lost && p.epoch > expected ? p.epoch : undefined;
}

/** Commits a moved server's record and runtime record (the registry placed it here): checked —
 *  a record that is gone by now cannot be committed, and the move is not answered as done. */
export function commitMove(d: MovesDeps, id: string): void {
  if (d.store.commitCreate(id)) return;
  if (d.store.servers.get(id)) return; // committed already (a round of resumeMoves)
  throw AppError.of('move_failed', `server ${id} was placed here but its record is gone: not taken`, { retryAfter: 30 });
}

/** Finishes what a server moved here takes over (each step on its own: one failing skips none
 *  after it), then clears its mark; `appWaitMs`: how long a started server's app may take to listen;
 *  `restoredAt`: the image's mtime once made from its checkpoint, nothing run on it since (the
 *  checkpoint's record carries it as the disk's `writtenAt` here: automatic checkpoints and the
 *  stale-copy check then see the disk as that checkpoint's until the server writes it). */
export async function finishTakeover(d: MovesDeps, log: Logger, id: string, appWaitMs = 0, restoredAt?: number): Promise<void> {
  const rec = d.store.servers.get(id);
  const t = rec?.takeover;
  if (!rec || !t) return;
  const core = d.hosting.core;
  const warn =
    (msg: string, more: Record<string, unknown> = {}) =>
    (err: unknown) =>
      log.warn(msg, { server: id, ...more, err });
  for (const c of t.checkpoints) {
    const r = c.id === t.checkpoint && restoredAt !== undefined ? { ...c, writtenAt: restoredAt } : c;
    await d.store.checkpoints.add(r).catch(warn('a moved server’s checkpoint record was not kept', { checkpoint: c.id }));
  }
  try {
    core.domains.takeOver(t.domains, rec.slug);
  } catch (err) {
    warn('a moved server’s own domains were not taken over')(err);
  }
  await d.registry?.shared
    .recordKey({ serverId: id, publicKey: rec.sshPublicKey, fingerprint: rec.keyFingerprint })
    .catch(warn('the moved server’s SSH key is recorded at the next start'));
  const account = t.exposed.length ? await core.accounts.book.byId(rec.accountId).catch(() => undefined) : undefined;
  for (const port of t.exposed) {
    if (!account) break;
    await core.exposures.expose(account, id, port).catch(warn('a moved server’s port was not exposed again', { port }));
  }
  if (t.note) await noteTo(d, id, t.note).catch(warn('a recovered server’s owner was not told what was lost'));
  if (t.running) {
    // through the start guard: the registry places it here now, and the wake fence bumps its epoch
    const started = await d.runtime.start(id).then(
      () => true,
      (err: unknown) => (warn('a moved server that ran on its source was not started here')(err), false),
    );
    // a running one's app answers before requests are handed over (none is told "app down" while it starts)
    if (started && appWaitMs > 0) await appUp(d, id, appWaitMs);
  }
  d.store.servers.takeoverDone(id);
  d.proxy.forget(id);
}

/** One round: every server handed over here that is still pending resolved by its placement
 *  (kept and committed, or removed), and every takeover a crash cut short finished. */
export async function resumeMoves(d: MovesDeps, log: Logger): Promise<void> {
  const r = d.registry;
  if (!r) return;
  const pending = d.hosting.core.servers.pending;
  for (const rec of d.store.servers.pendingAll()) {
    if (rec.pending!.op !== 'move' || pending.busy(rec.id)) continue;
    pending.begin(rec.id);
    try {
      await resolve(d, log, rec);
    } catch (err) {
      log.warn('a server handed over here is not resolved yet; tried again later', { server: rec.id, err });
    } finally {
      pending.end(rec.id);
    }
  }
  for (const rec of d.store.servers.all()) {
    if (!rec.takeover || pending.busy(rec.id)) continue;
    pending.begin(rec.id);
    try {
      await finishTakeover(d, log, rec.id);
      log.info('the takeover of a server moved here finished after a restart', { server: rec.id });
    } finally {
      pending.end(rec.id);
    }
  }
}

/** A pending `move` record: this host's (committed, its disk made again when gone), or removed. */
async function resolve(d: MovesDeps, log: Logger, rec: ServerRecord): Promise<void> {
  const core = d.hosting.core;
  const epoch = await takenHere(d, rec.id, rec.pending!.expected ?? 0);
  if (epoch === undefined) {
    log.info('a server handed over here is placed elsewhere: its unfinished copy here is removed', { server: rec.id });
    core.servers.pending.end(rec.id);
    await core.servers.abandon(rec.id);
    return;
  }
  if (!d.runtime.get(rec.id)) {
    // a crash took its disk (the runtime's start tears down a pending server): made again from its checkpoint
    const cps = core.checkpoints;
    if (!cps?.engine.available) throw AppError.of('not_configured', 'checkpoints are not available on this host');
    const account = await core.accounts.book.byId(rec.accountId);
    if (!account) throw AppError.of('move_failed', `the registry has no account ${rec.accountId}`);
    const m = await cps.engine.get(rec.id, rec.takeover!.checkpoint);
    const { spec, fromDisk } = specOf(d, rec, m);
    d.store.atomically(() => d.runtime.reserve?.({ ...spec, fromDisk }));
    await d.runtime.create({ ...spec, net: core.servers.netOf(account), fromDisk, start: false });
  }
  d.billing?.takeOver(rec.id, rec.takeover?.meteredTo);
  commitMove(d, rec.id);
  log.warn('a server handed over here before a crash or a lost answer is this host’s: committed', { server: rec.id, epoch });
  await finishTakeover(d, log, rec.id);
}
