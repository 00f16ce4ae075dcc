// The moves part (main.ts): the source's side (source.ts), the target's under the channel's API
// app (`withTarget`: ADOPT_PATH and PREPARE_PATH from a peer host only), the holds of requests
// for moving servers (holds.ts), the stages of images for moves to come (staging.ts, swept every
// STAGE_SWEEP_MS), the recovery of dead hosts' servers (recover.ts), the moves this host asked
// whose outcome it has not learnt (asked.ts), and servers handed over here left unresolved
// (takeover.ts), looked at once the registry answers and then every RESUME_EVERY_MS.

import { join } from 'node:path';
import { systemClock, type Timer } from '../clock.js';
import { AppError } from '../errors.js';
import { errorReply, sendReply, type HttpApp, type Req, type RequestInfo, type Res } from '../http/index.js';
import type { ServerRecord } from '../store/index.js';
import { UnsettledMoves } from './asked.js';
import { MoveHolds } from './holds.js';
import { MoveSource } from './source.js';
import { Recovery, type RecoveryReport } from './recover.js';
import { resumeMoves } from './takeover.js';
import { prepareHere, prepareRequestOf } from './prepare.js';
import { Staging } from './staging.js';
import { adopt, adoptRequestOf } from './target.js';
import type { MoveReport, MovesDeps } from './types.js';
import { ADOPT_PATH, PREPARE_PATH } from './wire.js';

export interface Moves {
  /** Moves `rec` (a server of this host) to host `to`; resolves once the target runs it. */
  move(rec: ServerRecord, to: string): Promise<MoveReport>;
  /** The host the registry places server `id` on (a move asked of a host that does not run it says where it runs). */
  placedOn(id: string): Promise<string | undefined>;
  /** Resolves when a move of server `id` ends (undefined: none holds its requests now). */
  holdOfServer(id: string): Promise<void> | undefined;
  /** Whether a move's outcome is being settled for server `id` (asked.ts: it removes a copy placed elsewhere itself). */
  settling(id: string): boolean;
  /** The same for a request to `host` (`<slug>.{domain}`). */
  holdOfHost(host: string): Promise<void> | undefined;
  /** The running moves' images staged here (staging.ts; tests look). */
  readonly staging: Staging;
  /** The channel's API app with the target's side of a move before it: `ADOPT_PATH` and `PREPARE_PATH` from a peer host. */
  withTarget(app: HttpApp): HttpApp;
  /** Recovers the servers of `host`, whose lease lapsed, from their checkpoints on the other hosts (recover.ts; the operator's `cluster recover`). */
  recover(host: string, o?: { force?: boolean }): Promise<RecoveryReport>;
  /** One round of the recovery's timer now (what its timer calls; tests call it instead of waiting). */
  recoveryRound(): Promise<void>;
  stop(): void;
}

/** How often servers handed over here and left unresolved are looked at again. */
const RESUME_EVERY_MS = 10_000;
/** How often stages whose adopt never came are looked for. */
const STAGE_SWEEP_MS = 60_000;

export function startMoves(d: MovesDeps): Moves {
  const holds = new MoveHolds();
  const log = d.log.child({ part: 'moves' });
  const clock = d.clock ?? systemClock;
  // `d` is the daemon's record, read when a move runs (the channel is made after this part)
  const staging = new Staging(
    join(d.cfg.dataDir, 'moves', 'staged'),
    () => d.hosting.core.checkpoints?.engine,
    () => clock.now(),
  );
  staging.wipe(); // what a killed run staged is never used
  const sweepTimer = clock.every(STAGE_SWEEP_MS, () => staging.sweep());
  const unsettled = new UnsettledMoves(d, log, holds);
  unsettled.start(); // before the edge listens: their requests wait from the first
  const source = new MoveSource(d, log, holds, unsettled);
  const suffix = `.${d.cfg.domain}`;
  const recovery = new Recovery(d, d.log.child({ part: 'recovery' }));
  const every = d.cfg.cluster.recoverAfter > 0 ? Math.min(5000, Math.max(500, Math.floor(d.cfg.cluster.recoverAfter / 4))) : 5000;
  recovery.start(every);
  let resumeTimer: Timer | undefined;
  let stopped = false;
  const resume = () => {
    resumeMoves(d, log)
      .catch((err) => log.warn('servers handed over here not resolved; tried again later', { err }))
      .finally(() => {
        if (!stopped) resumeTimer = clock.after(RESUME_EVERY_MS, resume);
      });
  };
  // once the registry answered this host's start (a refused start resolves nothing)
  if (d.registry) d.registry.ready.then(resume, () => {});
  const answer = async (req: Req, res: Res, info: RequestInfo) => {
    try {
      const a = await adopt(d, log, await adoptRequestOf(req), info.forwarded!, staging);
      sendReply(res, { status: 200, body: a });
    } catch (err) {
      sendReply(res, errorReply(err, info.requestId, log));
    }
  };
  const prepare = async (req: Req, res: Res, info: RequestInfo) => {
    try {
      sendReply(res, { status: 200, body: await prepareHere(d, log, staging, await prepareRequestOf(req), info.forwarded!) });
    } catch (err) {
      sendReply(res, errorReply(err, info.requestId, log));
    }
  };
  return {
    move: (rec, to) => source.move(rec, to),
    placedOn: async (id) => (/^srv_[0-9a-f]{1,32}$/.test(id) ? (await d.registry?.names.placement(id))?.host : undefined),
    holdOfServer: (id) => holds.ofServer(id),
    settling: (id) => unsettled.busy(id),
    holdOfHost: (host) => {
      if (!holds.size || !host.endsWith(suffix)) return undefined;
      return holds.ofSlug(host.slice(0, -suffix.length));
    },
    recover: (host, o) => recovery.recoverHost(host, 'operator', o),
    recoveryRound: () => recovery.tick(),
    staging,
    stop: () => (recovery.stop(), source.stop(), unsettled.stop(), (stopped = true), resumeTimer?.cancel(), sweepTimer.cancel()),
    withTarget: (app) => ({
      handle: (req, res, info) => {
        const path = (req.url ?? '').split('?')[0];
        if (path !== ADOPT_PATH && path !== PREPARE_PATH) return app.handle(req, res, info);
        // a peer host only (the channel's mutual TLS names it); never a client's request
        if (!info.forwarded || req.method !== 'POST')
          return (sendReply(res, errorReply(AppError.of('not_found', 'no such route'), info.requestId, log)), undefined);
        return path === ADOPT_PATH ? answer(req, res, info) : prepare(req, res, info);
      },
    }),
  };
}
