// The source's side of a move (issue 38 item 1), run by `rootbox servers move ID --to HOST` on the
// host that runs the server:
//   - refused with nothing changed: not in cluster mode, checkpoints in this host's own directory
//     (the target could not read them: move_needs_shared_store), a target that is unknown, this
//     host, down, or without room as its lease reports it, or whose channel does not answer within
//     a few seconds (a host just started: its session waited for), a server placed elsewhere, a
//     move of it under way;
//   - a running server: a checkpoint while it runs (most of its disk reaches the store before
//     anything stops), then requests for it wait (holds.ts), it stops, and a final incremental
//     checkpoint is taken; a sleeping one: its starts wait from the start (and its requests with
//     an app under run.sh; without one its static pages are served here until the target's
//     answer), and one checkpoint — none when its newest one holds its disk as it is;
//   - its metering is handed over: charged here up to the instant before the target is asked, not
//     here after it (billing's handOff), and metered by the target from that instant on — or here
//     again from it if the move fails;
//   - the target is asked over the channel to make it from that checkpoint and take its
//     placement from the epoch read here (target.ts); on its answer this host deletes its copy
//     (runtime, record, ports, checkpoint records — never the checkpoints in the store) and the
//     waiting requests go to the target;
//   - any failure before the target's answer (the store, the registry, the channel, the target)
//     leaves the server here and starts it again if it ran; a failed or missing answer first bumps
//     the placement's epoch here (compare-and-set), so a target still at work cannot take it
//     after — or finds the target took it (its answer lost): then the copy here goes as on success.
//     While the registry cannot say which (the answer lost and the registry down), the server
//     stays held and stopped here and the registry is asked again until it answers: a copy
//     started here before that could run beside the target's (only a target's refusal, a 4xx it
//     answered before taking anything, lets the server start here without the registry).
//     Once the target was asked, the server starts here again only on the registry's word that it
//     is still this host's (or the target's refusal); placed anywhere else, it never starts here again.
//     That holds across a restart: before the target is asked the server is marked in the data dir
//     (registry/asked.ts, flushed), the mark removed once the outcome is known; a daemon that
//     stops or is killed before that leaves it, and the next run's wake fence and moves part
//     (asked.ts) start nothing of it until the registry says where it is.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { deadline, pause, systemClock } from '../clock.js';
import { AppError, isAppError } from '../errors.js';
import { shortOf } from '../hosting/index.js';
import type { Logger } from '../log/index.js';
import type { HostRow, StartAnswer } from '../registry/index.js';
import type { ServerRecord } from '../store/index.js';
import { forgetCopy, type UnsettledMoves } from './asked.js';
import type { MoveHolds } from './holds.js';
import { askPrepare, postToTarget, PREPARE_WAIT_MS } from './prepare.js';
import type { MoveReport, MovesDeps } from './types.js';
import { ADOPT_PATH, AdoptAnswer, type AdoptRequest } from './wire.js';

const ANSWER_MAX = 64 * 1024;
/** The target's refusals another try does not change: no retryable move_failed. */
const FINAL = new Set(['server_exists', 'not_configured', 'invalid_request', 'invalid_json', 'move_needs_shared_store']);
/** How long the target may take to make the server from its checkpoint and start it. */
const ANSWER_WAIT_MS = 5 * 60_000;
/** The longest wait between two reads of a failed move's placement while the registry cannot be read. */
const RETRY_MAX_MS = 5000;

/** The errors of a target that answered it did not take the server (a 4xx: decided before its placement write). */
const refusals = new WeakSet<Error>();

/** The message logged while a move's outcome waits for the registry (tests watch for it). */
export const OUTCOME_UNKNOWN = 'the move’s outcome is unknown until the registry answers: the server stays held';

/** How long a move waits for a target whose lease runs to answer on the channel (a host that has
 *  just started or restarted: its session not open yet), and how often it looks meanwhile. */
const TARGET_WAIT_MS = 5000;
const TARGET_POLL_MS = 100;

/** Whether the channel reaches `to` (up by its lease: precheck) now; one whose session is not open
 *  yet is probed and waited for, a few seconds at most. */
async function reached(d: MovesDeps, row: HostRow, to: string): Promise<boolean> {
  const c = d.channel;
  if (!c) return false;
  const advertise = d.registry!.placements.host(to)?.advertise ?? row.advertise;
  if (c.answering(to, advertise)) return true;
  for (let left = d.targetWaitMs ?? TARGET_WAIT_MS; left > 0; left -= TARGET_POLL_MS) {
    c.probe(to, advertise); // nothing while a session is opening, or for a moment after one failed
    await pause(d.clock ?? systemClock, Math.min(left, TARGET_POLL_MS));
    if (c.answering(to, advertise)) return true;
  }
  return false;
}

/** Refuses a move that cannot succeed, before anything changes; answers the placement's epoch now. */
async function precheck(d: MovesDeps, rec: ServerRecord, to: string): Promise<void> {
  const r = d.registry;
  if (!r) throw AppError.of('not_configured', 'servers move between hosts of a cluster only (cluster.registry)');
  if (!d.cfg.checkpoints.store)
    throw AppError.of(
      'move_needs_shared_store',
      'this host keeps checkpoints in its own directory, which the target cannot read: set checkpoints.store = s3://bucket/prefix on every host to move servers',
    );
  if (to === r.host) throw AppError.of('move_to_self', `${to} is this host: server ${rec.id} runs here already`);
  const row = (await r.hosts.list()).find((h) => h.name === to);
  if (!row) throw AppError.of('move_target_unknown', `the cluster has no host ${to.slice(0, 80)}`);
  // up: its lease runs by the registry's row just read (a host that has just started, which the
  // placement cache's view may not show yet), or the view says so (a lease excused, the channel answering)
  const down = () => AppError.of('move_target_down', `host ${to} is down or cannot be reached: server ${rec.id} stays here`, { retryAfter: 30 });
  if (!d.channel || !(row.up || r.placements.host(to)?.up)) throw down();
  if (row.drain) throw AppError.of('move_target_draining', `host ${to} is being drained: server ${rec.id} stays here`);
  const short = shortOf(row.capacity, rec);
  if (short) throw AppError.of('move_target_full', `host ${to} ${short}: server ${rec.id} stays here`);
  if (!d.hosting.core.checkpoints?.engine.available) throw AppError.of('not_configured', 'checkpoints are not available on this host');
  // last (the refusals above come without a wait): the target answers on the channel, else
  // nothing stops here only for its ask to fail
  if (!(await reached(d, row, to))) throw down();
}

/** The placement's epoch as the registry has it, this host's (else 409 move_not_here). */
async function epochHere(d: MovesDeps, id: string): Promise<number> {
  const r = d.registry!;
  const p = await r.names.placement(id);
  if (!p || p.host !== r.host) throw AppError.of('move_not_here', `server ${id} is placed on ${p?.host ?? 'no host'}, not on ${r.host}`);
  return p.epoch;
}

/** Asks the target to take the server; its answer, or the AppError it gave (or host_unavailable). */
export async function ask(d: MovesDeps, to: string, body: AdoptRequest): Promise<AdoptAnswer> {
  const c = await postToTarget(d, to, ADOPT_PATH, body, ANSWER_MAX);
  if (c.status === 200) {
    const a = AdoptAnswer.safeParse(c.json);
    if (a.success) return a.data;
  }
  const err = c.json as { error?: string; detail?: string } | undefined;
  const detail = `host ${to} did not take server ${body.server.id}: ${err?.detail ?? `status ${c.status}`}`;
  const refused = <E extends Error>(e: E): E => (c.status >= 400 && c.status < 500 && err?.error && refusals.add(e), e);
  if (err?.error === 'move_target_full' || err?.error === 'placement_conflict') throw refused(AppError.of(err.error, detail));
  if (err?.error === 'host_unavailable') throw AppError.of('move_target_down', detail, { retryAfter: 30 });
  // what another try does not change (it has the server, takes no moved ones, reads no such request)
  if (err?.error && FINAL.has(err.error)) throw refused(AppError.of('move_refused', `${detail} (${err.error})`));
  throw refused(AppError.of('move_failed', detail, { retryAfter: 30 }));
}

export class MoveSource {
  private readonly moving = new Set<string>();
  private stopped = false;

  constructor(
    private readonly d: MovesDeps,
    private readonly log: Logger,
    private readonly holds: MoveHolds,
    private readonly unsettled: UnsettledMoves,
  ) {}

  async move(rec: ServerRecord, to: string): Promise<MoveReport> {
    const d = this.d;
    await precheck(d, rec, to);
    if (this.moving.has(rec.id)) throw AppError.of('move_in_progress', `server ${rec.id} is being moved already`);
    if (d.registry!.asked.has(rec.id))
      throw AppError.of('move_in_progress', `server ${rec.id}'s last move has an outcome this host has not learnt yet (the registry answers it)`, {
        retryAfter: 30,
      });
    this.moving.add(rec.id);
    try {
      return await this.run(rec, to);
    } finally {
      this.moving.delete(rec.id);
    }
  }

  private async run(rec: ServerRecord, to: string): Promise<MoveReport> {
    const d = this.d;
    const now = d.now ?? Date.now;
    const clock = d.clock ?? systemClock;
    const t0 = now();
    const cps = d.hosting.core.checkpoints!;
    const account = d.store.accounts.get(rec.accountId);
    if (!account) throw AppError.of('move_failed', `server ${rec.id}'s account is not in this host's store`);
    await epochHere(d, rec.id);
    const runs = () => ['running', 'waking'].includes(d.presence.state(rec.id) ?? d.runtime.get(rec.id)?.state ?? '');
    const log = this.log.child({ server: rec.id, to });
    // a running server: most of its disk to the store while it serves, and made into an image on
    // the target (prepare.ts) — after the stop only what changed since is fetched there
    let base: string | undefined;
    if (runs()) {
      const c1 = (await cps.take(rec, account, 'auto', `before a move to ${to}`)).id;
      const ask = { server: rec.id, checkpoint: c1, memoryBytes: rec.memoryBytes, diskBytes: rec.diskBytes };
      base = await deadline(
        clock,
        askPrepare(d, to, ask),
        PREPARE_WAIT_MS,
        () => new Error(`host ${to} did not stage within ${PREPARE_WAIT_MS / 1000} s`),
      ).then(
        () => c1,
        (err: unknown) => (
          this.log.warn('the target did not stage the server’s checkpoint: its whole image is made at the hand-over', { server: rec.id, to, err }),
          undefined
        ),
      );
    }
    let heldAt = now();
    const release = this.holds.begin(rec.id, rec.slug);
    // read once requests wait: a wake that got in before counts
    const running = runs();
    // asleep without an app: its pages are served from its disk here (no wake: its starts wait)
    // until the target answers, so its requests wait only for the hand-over
    const rootfs = d.runtime.get(rec.id)?.rootfs;
    const served = !running && !!rootfs && existsSync(join(rootfs, 'root')) && !cps.settingsOf(rec, account).runSh;
    if (served) this.holds.pass(rec.id);
    log.info(served ? 'moving a server: its pages are served here meanwhile' : 'moving a server: its requests wait', { slug: rec.slug, running });
    const phases = { stop: 0, checkpoint: 0, target: 0 };
    let mark = now();
    const lap = (k: keyof typeof phases) => ((phases[k] = now() - mark), (mark = now()));
    let stopped = false;
    let handed = false;
    /** Before the ask nothing left this host; after it, only the registry's `started` lets it run here again. */
    let mayRestart = true;
    let answer: AdoptAnswer | undefined;
    let checkpoint = '';
    /** The newest checkpoint held the disk as it is: none was taken for the move. */
    let reused = false;
    try {
      // stopped without a parked container (asleep: its parked one goes): this host's delete
      // afterwards then touches no container, nor the cgroup of that name the target's copy has
      // when both run on one machine (a test's cluster)
      await d.runtime.stop(rec.id, { park: false });
      stopped = running;
      lap('stop');
      // a sleeping server's newest checkpoint holds its disk when nothing wrote the image since
      // (the test the automatic checkpoints make): the target restores that one, none is taken
      const newest = running ? undefined : cps.list(rec)[0];
      reused = !!newest && !cps.changed(rec);
      checkpoint = reused ? newest!.id : (await cps.take(rec, account, 'auto', `moved to ${to}`)).id;
      lap('checkpoint');
      const epoch = await epochHere(d, rec.id);
      // charged here up to now, then no more here: the target meters it from this instant
      handed = d.billing !== undefined;
      const meteredTo = await d.billing?.handOff(rec.id);
      const body: AdoptRequest = {
        server: {
          id: rec.id,
          accountId: rec.accountId,
          slug: rec.slug,
          sshPublicKey: rec.sshPublicKey,
          keyFingerprint: rec.keyFingerprint,
          memoryBytes: rec.memoryBytes,
          diskBytes: rec.diskBytes,
          neverSleep: rec.neverSleep,
          suspended: rec.suspended,
          flag: rec.flag,
          createdAt: rec.createdAt,
        },
        checkpoint,
        // only to a target that staged it (an older one's schema refuses the field)
        ...(base ? { base } : {}),
        epoch,
        run: d.registry!.identity.run,
        running,
        exposed: d.hosting.core.exposures.list(rec.id).map((e) => e.container_port),
        checkpoints: d.store.checkpoints.list(rec.id),
        domains: d.store.domains.byServer(rec.id),
        meteredTo,
      };
      // asked from here on: the target may take it, so only the registry's `started` (or the
      // target's refusal) lets it run here again — not a wait for the registry cut short by the
      // daemon's stop, nor a failure after the target's answer. Marked first, on disk: a run
      // started after a kill from here on knows the outcome is unknown (a failure to keep the mark: not asked)
      d.registry!.asked.mark(rec.id, { to, epoch, running });
      mayRestart = false;
      try {
        answer = await deadline(clock, ask(d, to, body), ANSWER_WAIT_MS, () =>
          AppError.of('move_failed', `host ${to} did not answer within ${ANSWER_WAIT_MS / 1000} s`, { retryAfter: 30 }),
        );
      } catch (e) {
        // the placement's epoch bumped here (the wake fence's compare-and-set): a target still at
        // work can no longer take it — or the target took it already and its answer was lost.
        // Asked once, the server starts here again only on the registry's word that it is still
        // this host's (or the target's refusal): until the registry answers, it stays stopped.
        const kept = await this.placementAfter(rec.id, e, log);
        if (!kept || kept === 'deleted' || 'started' in kept || kept.host !== to || kept.epoch <= epoch) {
          mayRestart = !kept || (kept !== 'deleted' && 'started' in kept);
          if (!mayRestart) log.error('a server whose move failed is not placed here any more: not started here again', { placed: kept });
          throw e;
        }
        log.warn('the target took the server but its answer was lost', { err: (e as Error).message });
        answer = { epoch: kept.epoch, exposed_ports: [], state: 'unknown' };
      }
      lap('target');
      if (served) (this.holds.hold(rec.id), (heldAt = now()));
      // the record first: the requests held go to the target from here on (the front routes by it)
      d.hosting.core.domains.handOff(rec.id);
      d.store.servers.remove(rec.id);
      d.registry!.names.forget(rec.id); // the target's epoch now: a start here (moved back) reads its placement
      d.billing?.handedOff(rec.id, true);
      d.proxy.forget(rec.id);
      await d.registry!.placements.sync().catch(() => {});
    } catch (e) {
      // metered here again from the hand-off, unless the registry places it elsewhere now (never started here again)
      if (handed) d.billing!.handedOff(rec.id, !mayRestart);
      // the outcome known and the server still this host's: the mark goes before it starts again;
      // else its copy is settled from the registry (this run's, or the next one's)
      if (mayRestart) d.registry!.asked.clear(rec.id);
      release();
      if (!mayRestart) this.unsettled.settle(rec.id);
      log.warn('move failed; the server stays here', { err: e });
      if (stopped && mayRestart)
        await d.runtime.start(rec.id).then(
          () => log.info('a server whose move failed runs here again'),
          (err: unknown) => log.error('a server whose move failed did not start again', { err }),
        );
      throw isAppError(e) ? e : AppError.of('move_failed', `server ${rec.id} was not moved to ${to}; it stays here`, { cause: e, retryAfter: 30 });
    }
    const heldMs = now() - heldAt;
    release();
    // the outcome known and the copy gone: the mark too (a copy not all removed keeps it: what is
    // left goes in the background, tried again until it is gone, then the mark — asked.ts)
    await forgetCopy(d, rec.id).then(
      () => d.registry!.asked.clear(rec.id),
      (err: unknown) => (
        log.error('the copy a move left behind here was not all removed (the registry places the server on the target: it never starts here): tried again', {
          err,
        }),
        this.unsettled.settle(rec.id)
      ),
    );
    log.info('server moved', { slug: rec.slug, epoch: answer.epoch, heldMs, running, phases, checkpoint, reused });
    return {
      server: rec.id,
      slug: rec.slug,
      from: d.registry!.host,
      to,
      epoch: answer.epoch,
      was: running ? 'running' : 'sleeping',
      checkpoint,
      held_ms: heldMs,
      held_phases_ms: phases,
      took_ms: now() - t0,
      exposed_ports: answer.exposed_ports,
    };
  }

  /** Ends the waits for the registry of moves under way (the daemon stops: their servers stay held). */
  stop(): void {
    this.stopped = true;
  }

  /** After the target's answer did not come (`e`): the placement's epoch bumped here, or what the
   *  registry has instead. A registry that cannot be read is asked again until it answers — the
   *  server's requests and starts wait meanwhile — unless the target refused (then undefined). */
  private async placementAfter(id: string, e: unknown, log: Logger): Promise<StartAnswer> {
    const refused = e instanceof Error && refusals.has(e);
    for (let wait = 200, said = false; ; wait = Math.min(wait * 2, RETRY_MAX_MS)) {
      try {
        return await this.d.registry!.names.startAt(id);
      } catch (err) {
        if (refused) return undefined;
        if (this.stopped) throw AppError.of('move_failed', `the outcome of server ${id}'s move is not known; it is settled at the next start`, { cause: err });
        if (!said) log.warn(OUTCOME_UNKNOWN, { err: (e as Error).message, registry: (err as Error).message });
        said = true;
        await pause(this.d.clock ?? systemClock, wait);
      }
    }
  }
}
