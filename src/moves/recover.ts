// Recovery of a dead host's servers (issue 38 item 3, DESIGN part 7). When the dead-host decision
// (registry/deadhost.ts through the contact's verdict) says a host is dead — its lease lapsed for
// cluster.recoverAfter and no peer reached it for as long —, or the operator says so
// (`rootbox cluster recover HOST`, refused while its lease runs), one host at a time (the
// registry's recovery lease) re-places each server the registry still places on it:
//   - from its newest checkpoint in the shared store — along its lineage, the highest placement
//     epoch first, never by the hosts' clocks alone (`recoveryCheckpoint`) —, on the up host with the most room (this
//     one included), a bounded number at a time; the target makes it as a move's target does
//     (target.ts `adopt`) and takes its placement from the epoch read here — compare-and-set, so
//     a server another host took meanwhile is left to it;
//   - the server's record is made from what the registry and the store keep, since the dead
//     host's store may be gone with its data dir: placement (account, slug, epoch), SSH key,
//     its settings as its host last wrote them (never_sleep, exposed container ports: schema 25,
//     written on every change, so one after its newest checkpoint is kept; and its suspension), its own domains (the
//     registry's claims), the checkpoint's disk size, the account's tier ceilings; it sleeps on
//     its new host, a never_sleep one runs there; its ports are exposed again on the target's own;
//   - a server that ran after its newest checkpoint (its host wrote when it last ran:
//     `server_activity`) is recovered too, and its owner is told what was lost (a line in its
//     /var/log/rootbox.log, written by the target);
//   - a server with no checkpoint in the store cannot be recovered: it stays placed on the dead
//     host, logged and listed by `cluster status` as unrecoverable (no empty disk is made).
// A recovery is no create: no account's create limits are counted. Every outcome is recorded in
// the registry (`recoveries`). A server whose recovery failed (no room, no account, a target that
// did not answer within ASK_WAIT_MS) is tried again by the timer only after a wait doubled per
// failure; the operator's `cluster recover` tries every one at once. A draining host is no target.
// An operator-suspended server comes back suspended (its settings, schema 29) and is not started.

import { byLineage, type Manifest } from '../checkpoints/index.js';
import { deadline, systemClock, type Clock, type Timer } from '../clock.js';
import { AppError, isAppError } from '../errors.js';
import { shortOf, TIER_LIMITS, tierOf } from '../hosting/index.js';
import type { Logger } from '../log/index.js';
import type { DeadPlacement, HostRow } from '../registry/index.js';
import { RegistryRecoveries } from '../registry/index.js';
import { ask } from './source.js';
import { adopt } from './target.js';
import type { MovesDeps } from './types.js';
import type { AdoptAnswer, AdoptRequest } from './wire.js';

type DomainState = AdoptRequest['domains'][number]['state'];
const STATES = new Set<string>(['pending_dns', 'issuing', 'active', 'failed'] satisfies DomainState[]);

/** Servers recovered at once. */
const BATCH = 4;
/** The recovery lease, renewed between batches (a batch's restores fit in it; a holder that died frees it after). */
const LEASE_MS = 2 * 60_000;
/** How long a target may take to make a recovered server (as a move's source waits: source.ts). */
const ASK_WAIT_MS = 5 * 60_000;
/** The first wait before a server whose recovery failed is tried again by the timer; doubled per failure, up to the max. */
const RETRY_MS = 30_000;
const RETRY_MAX_MS = 30 * 60_000;

export interface RecoveryOptions {
  /** How long a target may take to answer (ASK_WAIT_MS). */
  askWaitMs?: number;
  /** The first wait before a failed server is tried again (RETRY_MS). */
  retryMs?: number;
  now?: () => number;
}

export interface RecoveryReport {
  host: string;
  by: 'dead' | 'operator';
  recovered: { server: string; slug: string; to: string; checkpoint: string; lost_ms?: number }[];
  unrecoverable: { server: string; slug: string; why: string }[];
  failed: { server: string; slug: string; why: string }[];
}

type Capacity = HostRow['capacity'];

/** Picks the up host with the most memory room that fits `need`, counting what this round placed already. */
function pickHost(rows: { name: string; capacity: Capacity }[], need: { memoryBytes: number; diskBytes: number }): string | undefined {
  const fit = rows.filter((h) => !shortOf(h.capacity, need));
  fit.sort(
    (a, b) =>
      b.capacity.memoryRoomBytes! - a.capacity.memoryRoomBytes! || b.capacity.diskRoomBytes! - a.capacity.diskRoomBytes! || a.name.localeCompare(b.name),
  );
  const h = fit[0];
  if (!h) return undefined;
  const c = h.capacity;
  c.memoryRoomBytes = c.memoryRoomBytes! - need.memoryBytes;
  c.diskRoomBytes = c.diskRoomBytes! - need.diskBytes;
  c.servers = (c.servers ?? 0) + 1;
  return h.name;
}

/** The checkpoint a server is recovered from: the newest along its lineage (checkpoints/manifest.ts
 *  `byLineage`: the highest placement epoch, then the newest within it; manifests without an epoch
 *  last), never by the wall clock alone — each host stamps its own, the clocks differ, and after a
 *  move the old host may write one after the new host took the placement. One whose epoch is above
 *  the placement's (`epoch`, what the registry holds now) cannot have been taken legitimately: it
 *  is skipped (`skipped`, logged by the caller). `ordered`: the usable ones, newest first. */
export function recoveryCheckpoint(manifests: readonly Manifest[], epoch: number): { chosen?: Manifest; ordered: Manifest[]; skipped: Manifest[] } {
  const skipped = manifests.filter((m) => m.epoch !== undefined && m.epoch > epoch);
  const ordered = manifests.filter((m) => m.epoch === undefined || m.epoch <= epoch).sort(byLineage);
  return { chosen: ordered[0], ordered, skipped };
}

/** The words a recovered server's rootbox.log gets when it ran after its newest checkpoint. */
export function lossNote(from: string, checkpointAt: number, activeAt: number): string {
  const at = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');
  return (
    `[rootbox ${at(Date.now())}] host ${from} died; this server was recovered on another host from its newest checkpoint, taken ${at(checkpointAt)}. ` +
    `It ran until about ${at(activeAt)}: what it did in those ${Math.round((activeAt - checkpointAt) / 1000)} s is lost.\n`
  );
}

export class Recovery {
  private readonly rec?: RegistryRecoveries;
  private busy = false;
  private timer?: Timer;
  /** Servers found unrecoverable in this run (server@epoch): reported once, checked again only by the operator. */
  private readonly reported = new Set<string>();
  /** Servers whose recovery failed (no room, no account, a damaged checkpoint, a target that did
   *  not answer): the timer tries each again only once its wait ran out, doubled per failure. */
  private readonly retry = new Map<string, { at: number; attempts: number }>();
  private readonly now: () => number;
  private readonly clock: Clock;

  constructor(
    private readonly d: MovesDeps,
    private readonly log: Logger,
    private readonly o: RecoveryOptions = {},
  ) {
    if (d.registry) this.rec = new RegistryRecoveries(d.registry.pool, d.registry.host);
    this.now = o.now ?? d.now ?? Date.now;
    this.clock = d.clock ?? systemClock;
  }

  /** Whether the timer leaves server `id` alone now (its last recovery failed a short while ago). */
  private waiting(id: string): boolean {
    return (this.retry.get(id)?.at ?? 0) > this.now();
  }

  /** Every `ms`: this host's running servers marked active, and any dead host's servers recovered (recoverAfter > 0). */
  start(ms: number): void {
    if (!this.rec) return;
    const tick = () => {
      this.tick()
        // the registry away: nothing can be recovered, and the self-fence and the heartbeat say so already
        .catch((err) => !(isAppError(err) && err.code === 'registry_unavailable') && this.log.warn('recovery check failed', { err }))
        .finally(() => {
          if (this.timer) this.timer = this.clock.after(ms, tick);
        });
    };
    this.timer = this.clock.after(ms, tick);
  }

  stop(): void {
    this.timer?.cancel();
    this.timer = undefined;
  }

  /** One round: activity written; each dead host with servers placed on it recovered. */
  async tick(): Promise<void> {
    const r = this.d.registry!;
    const running = this.d.runtime
      .list()
      .filter((s) => s.state === 'running' || s.state === 'waking')
      .map((s) => s.id);
    await this.rec!.active(running, this.now());
    // not before this host joined and its channel runs (the dead host's peers are asked over it)
    if (this.d.cfg.cluster.recoverAfter <= 0 || this.busy || !this.d.channel) return;
    for (const h of r.placements.hosts()) {
      if (h.name === r.host || !r.contact.verdict(h.name).dead) continue;
      const left = (await this.rec!.placedOn(h.name)).filter((p) => !this.reported.has(`${p.serverId}@${p.epoch}`) && !this.waiting(p.serverId));
      if (!left.length) continue;
      await this.recoverHost(h.name, 'dead').catch((err) => {
        if (!(isAppError(err) && err.code === 'recovery_busy')) this.log.warn('recovery of a dead host failed', { host: h.name, err });
      });
    }
  }

  /** Recovers every server the registry places on `dead` (the operator's word: its lease must have
   *  lapsed, no peer may have reached it over the channel while its own fence may not have stopped
   *  its servers yet, and with recoverAfter 0 — no self-fence at all — only with `force`). */
  async recoverHost(dead: string, by: 'dead' | 'operator', o: { force?: boolean } = {}): Promise<RecoveryReport> {
    const d = this.d;
    const r = d.registry;
    if (!r || !this.rec) throw AppError.of('not_configured', 'servers are recovered in a cluster only (cluster.registry)');
    const rows = await r.hosts.list();
    const row = rows.find((h) => h.name === dead);
    if (!row || dead === r.host) throw AppError.of('recover_host_unknown', `the cluster has no other host ${dead.slice(0, 80)}`);
    if (row.up)
      throw AppError.of('recover_host_live', `host ${dead}'s lease still runs (${Math.ceil(row.leaseLeftMs / 1000)} s left): its servers are its own`);
    if (by === 'operator') this.assertMayRecover(dead, row, o.force === true);
    if (!d.cfg.checkpoints.store || !d.hosting.core.checkpoints?.engine.available)
      throw AppError.of(
        'move_needs_shared_store',
        'servers are recovered from checkpoints in a shared S3 store: set checkpoints.store = s3://bucket/prefix on every host',
      );
    if (this.busy) throw AppError.of('recovery_busy', 'this host is recovering servers already');
    this.busy = true;
    try {
      if (!(await this.rec.lease(dead, LEASE_MS))) throw AppError.of('recovery_busy', 'another host is recovering servers now; try again shortly');
      try {
        return await this.run(dead, by, rows);
      } finally {
        await this.rec.release().catch(() => {});
      }
    } finally {
      this.busy = false;
    }
  }

  /** The operator's recovery of a host whose lease lapsed: refused while this host or, by their
   *  heartbeats, any other reached it over the channel within the lease or within the time its own
   *  self-fence takes to stop its servers (recoverAfter / 2): it may still run them. With
   *  recoverAfter 0 nothing fences a host cut off, or one whose daemon stopped while its containers
   *  run: only `force`, the operator's word that it is down, recovers it then. */
  private assertMayRecover(dead: string, row: HostRow, force: boolean): void {
    const c = this.d.cfg.cluster;
    const ago = this.d.registry!.contact.reachedAgo(dead, row.reachedMs ?? undefined);
    const window = Math.max(c.lease, Math.floor(c.recoverAfter / 2));
    if (ago !== undefined && ago < window)
      throw AppError.of(
        'recover_host_reached',
        `host ${dead} was reached over the channel ${Math.round(ago / 1000)} s ago: it may still run its servers (cut off from the registry alone); try again once it has been silent for ${Math.ceil(window / 1000)} s`,
      );
    if (c.recoverAfter <= 0 && !force)
      throw AppError.of(
        'recover_needs_force',
        `cluster.recoverAfter is 0, so no host fences itself: if ${dead} still runs (cut off, or its daemon stopped while its containers run), its servers would run on two hosts with two diverging disks. Make sure it is down (powered off, or its containers stopped), then run again with --force`,
      );
  }

  private async run(dead: string, by: 'dead' | 'operator', rows: HostRow[]): Promise<RecoveryReport> {
    const r = this.d.registry!;
    const report: RecoveryReport = { host: dead, by, recovered: [], unrecoverable: [], failed: [] };
    // never a draining host: it takes no servers (they would move again)
    const targets = rows.filter((h) => h.up && h.name !== dead && !h.drain).map((h) => ({ name: h.name, capacity: { ...h.capacity } }));
    // the timer's round leaves the servers that failed a short while ago; the operator's tries every one
    const placed = (await this.rec!.placedOn(dead)).filter((p) => by === 'operator' || !this.waiting(p.serverId));
    this.log.warn('recovering the servers of a dead host', { host: dead, by, servers: placed.length });
    for (let i = 0; i < placed.length; i += BATCH) {
      if (i && !(await this.rec!.lease(dead, LEASE_MS))) throw AppError.of('recovery_busy', 'the recovery lease was lost');
      await Promise.all(placed.slice(i, i + BATCH).map((p) => this.one(dead, p, targets, report)));
    }
    await r.placements.sync().catch(() => {});
    this.log.warn('recovery of a dead host ended', {
      host: dead,
      recovered: report.recovered.length,
      unrecoverable: report.unrecoverable.length,
      failed: report.failed.length,
    });
    return report;
  }

  private async one(dead: string, p: DeadPlacement, targets: { name: string; capacity: Capacity }[], report: RecoveryReport): Promise<void> {
    const d = this.d;
    const r = d.registry!;
    const log = this.log.child({ server: p.serverId, from: dead });
    const refuse = async (kind: 'unrecoverable' | 'failed', why: string) => {
      report[kind].push({ server: p.serverId, slug: p.slug, why });
      if (kind === 'unrecoverable') this.reported.add(`${p.serverId}@${p.epoch}`);
      else {
        const attempts = (this.retry.get(p.serverId)?.attempts ?? 0) + 1;
        this.retry.set(p.serverId, { at: this.now() + Math.min(RETRY_MAX_MS, (this.o.retryMs ?? RETRY_MS) * 2 ** (attempts - 1)), attempts });
      }
      log.error(kind === 'unrecoverable' ? 'a server of a dead host cannot be recovered' : 'a server of a dead host was not recovered', { slug: p.slug, why });
      await this.rec!.record({ serverId: p.serverId, from: dead, outcome: kind, detail: why }).catch(() => {});
    };
    try {
      const engine = d.hosting.core.checkpoints!.engine;
      const all = (await engine.list(p.serverId)).filter((m) => m.serverId === p.serverId);
      const { chosen: newest, skipped } = recoveryCheckpoint(all, p.epoch);
      for (const m of skipped)
        log.error("a checkpoint of a dead host's server names a placement epoch above the registry's: skipped", {
          slug: p.slug,
          checkpoint: m.id,
          epoch: m.epoch,
          placementEpoch: p.epoch,
        });
      const manifests = all.filter((m) => !skipped.includes(m));
      if (!newest) return await refuse('unrecoverable', 'no checkpoint of it in the store: its disk was only on the dead host (it stays placed there)');
      if (!p.publicKey || !p.fingerprint) return await refuse('unrecoverable', 'the registry has no SSH key of it');
      const account = await d.hosting.core.accounts.book.byId(p.accountId);
      if (!account) return await refuse('failed', `the registry has no account ${p.accountId}`);
      const need = { memoryBytes: TIER_LIMITS[tierOf(account)].memoryBytes, diskBytes: newest.imageBytes };
      const to = pickHost(targets, need);
      if (!to) return await refuse('failed', 'no up host has room for it');
      const lostMs = p.activeAt !== undefined && p.activeAt > newest.createdAt ? p.activeAt - newest.createdAt : undefined;
      const neverSleep = p.neverSleep ?? false;
      const domains = (await this.rec!.domainsOf(p.serverId))
        .filter((x) => x.accountId === p.accountId && STATES.has(x.state))
        .map((x) => ({
          domain: x.domain,
          serverId: p.serverId,
          accountId: p.accountId,
          token: d.hosting.core.domains.token(p.accountId, x.domain),
          // a certificate order cut off with its host: ordered again by the new host's sweep (which takes no `issuing` one)
          state: (x.state === 'issuing' ? 'pending_dns' : x.state) as DomainState,
          apex: x.domain.split('.').length === 2,
          createdAt: x.claimedAt,
          ...(x.state === 'active' ? { activeAt: x.claimedAt } : {}),
        }));
      const body: AdoptRequest = {
        server: {
          id: p.serverId,
          accountId: p.accountId,
          slug: p.slug,
          sshPublicKey: p.publicKey,
          keyFingerprint: p.fingerprint,
          ...need,
          neverSleep,
          // as its host last wrote them: an operator's suspension outlasts the recovery
          suspended: p.suspended ?? false,
          flag: p.suspended ? (p.flag ?? null) : null,
          createdAt: Math.min(...manifests.map((m) => m.createdAt)),
        },
        checkpoint: newest.id,
        epoch: p.epoch,
        running: neverSleep && !p.suspended,
        exposed: p.exposed ?? [],
        checkpoints: manifests.map((m) => ({
          id: m.id,
          serverId: m.serverId,
          accountId: p.accountId,
          createdAt: m.createdAt,
          kind: m.kind,
          ...(m.comment ? { comment: m.comment } : {}),
          sizeBytes: m.dataBytes,
          newBytes: m.newBytes,
        })),
        domains,
        ...(lostMs !== undefined ? { note: lossNote(dead, newest.createdAt, p.activeAt!) } : {}),
      };
      const a = to === r.host ? await adopt(d, log, body, dead) : await this.asked(to, body);
      this.retry.delete(p.serverId);
      report.recovered.push({ server: p.serverId, slug: p.slug, to, checkpoint: newest.id, ...(lostMs !== undefined ? { lost_ms: lostMs } : {}) });
      log.warn('a server of a dead host recovered', { slug: p.slug, to, epoch: a.epoch, checkpoint: newest.id, lostMs });
      await this.rec!.record({
        serverId: p.serverId,
        from: dead,
        to,
        outcome: 'recovered',
        detail: `from checkpoint ${newest.id}${lostMs !== undefined ? `; it ran ${Math.round(lostMs / 1000)} s after it: that is lost` : ''}`,
        ...(lostMs !== undefined ? { lostMs } : {}),
      }).catch(() => {});
    } catch (e) {
      if (isAppError(e) && e.code === 'placement_conflict')
        return void (this.retry.delete(p.serverId), log.info('a server of a dead host was taken by another host meanwhile', { detail: e.detail }));
      await refuse('failed', isAppError(e) ? e.detail : (e as Error).message);
    }
  }

  /** The target's answer, or move_failed once it took longer than the deadline (a peer that never
   *  answers does not hold this host's recovery: a late take is the compare-and-set's to settle). */
  private asked(to: string, body: AdoptRequest): Promise<AdoptAnswer> {
    const ms = this.o.askWaitMs ?? ASK_WAIT_MS;
    return deadline(this.clock, ask(this.d, to, body), ms, () => AppError.of('move_failed', `host ${to} did not answer within ${Math.round(ms / 1000)} s`));
  }
}
