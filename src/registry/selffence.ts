// Self-fencing (issue 38): a host out of contact — reaching neither the registry nor a peer that
// reaches it, and not hearing every host that could recover it (what counts as contact: deadhost.ts)
// — freezes its running servers, then stops them, before the others may count it dead and recover
// its servers from their checkpoints (the bounds and why: deadhost.ts). While it is cut off it
// starts no server (the runtime's start guard asks `check` before the wake fence, which would
// start from what this host has while the registry is away). Once the registry or a peer answers
// again, the servers it froze are thawed; the ones it stopped start on demand as usual, through
// the wake fence (which refuses a server recovered elsewhere meanwhile). A host whose peers
// all answer while none reaches the registry (an outage everyone sees) never fences: nobody can
// recover anything then. The servers are behind a small interface (main.ts gives the runtime's).

import type { Clock, Timer } from '../clock.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Contact } from './contact.js';
import { fenceBounds, fenceStep, type FenceStep } from './deadhost.js';
import { FenceSettlement } from './fencestate.js';

/** What the fence does to this host's servers (the runtime's verbs). */
export interface FencedServers {
  /** Servers whose container runs now (frozen ones included). */
  running(): string[];
  /** Whether a running server's processes are frozen now (a doze: not the fence's to freeze or thaw). */
  frozen(id: string): boolean;
  freeze(id: string): Promise<unknown>;
  thaw(id: string): Promise<unknown>;
  stop(id: string): Promise<unknown>;
}

export interface SelfFenceOptions {
  contact: Contact;
  servers: FencedServers;
  recoverAfterMs: number;
  log: Logger;
  /** The timer of the checks (tests move it); its now() is not read. */
  clock: Clock;
  /** Called when this host reaches the registry again after it fenced itself, also when a peer
   *  answered first and ended the fence before (main.ts: hosting removes its copies of servers
   *  placed on another host meanwhile); resolves false or throws when the clean-up is not done
   *  (called again at the next check). */
  healed?: () => Promise<boolean | void>;
  /** How often contact is read (default: recoverAfter / 20, between 100 ms and 1 s; 1 s with recoverAfter 0). */
  everyMs?: number;
  /** Whether the stop is settled, kept across a restart (fencestate.ts; registry.ts gives the data
   *  dir's, which the wake fence reads too). Default: in memory only. */
  settlement?: FenceSettlement;
}

/** The start guard's first question: 503 host_fenced while this host is cut off past the freeze
 *  bound. Read fresh at each start, so it holds before the fence's first check too (a host
 *  restarted while cut off counts from the last contact its previous run saved: contact.ts). */
export function assertNotCutOff(contact: Contact, recoverAfterMs: number, log: Logger, id: string): void {
  if (fenceStep(contact.cutOffForMs(), recoverAfterMs, contact.knowsPeers()) === 'serve') return;
  log.warn('not starting a server: this host reaches neither the registry nor any peer', { server: id });
  throw AppError.of('host_fenced', 'this host cannot reach the rest of the cluster now; it starts no server until it can', { retryAfter: 5 });
}

/** The fence over this host's servers. After a fence that reached its stop step, a peer answering
 *  first ends the fence but settles nothing: until the registry answered and `healed` read the
 *  placements (`unsettled`), a server the fence tried to stop stays frozen, and no start or thaw
 *  goes ahead on what this host alone knows — also after a restart (the mark is kept in the data
 *  dir: fencestate.ts), and the clean-up is then owed at once. */
export class SelfFence {
  private step: FenceStep = 'serve';
  /** Servers this fence froze (thawed when contact comes back; a doze of presence is not ours). */
  private readonly frozen = new Set<string>();
  private timer?: Timer;
  private busy?: Promise<void>;
  /** The fence acted since the registry was last reached: `healed` is owed once it is reached again
   *  (a peer may answer first and end the fence while the registry is still away); cleared only
   *  when `healed` succeeded (a failure is tried again at the next check). */
  private owesHeal: boolean;
  /** Servers the fence tried to stop since `healed` last succeeded: another host may have recovered
   *  them meanwhile, so one still frozen stays frozen until `healed` read their placements. */
  private readonly stopTried = new Set<string>();
  /** The fence reached its stop step since `healed` last succeeded, in this run or a run before (see `unsettled`). */
  private readonly settlement: FenceSettlement;
  /** Servers frozen and stopped by the fence (observability and tests). */
  freezes = 0;
  stops = 0;

  constructor(private readonly o: SelfFenceOptions) {
    this.settlement = o.settlement ?? new FenceSettlement();
    // a run before stopped servers and never read their placements: the clean-up is owed now
    this.owesHeal = this.settlement.unsettled;
  }

  /** Starts the checks. With recoverAfter 0 (never recovered automatically) nothing is fenced, but
   *  the contact is still read: this host's heartbeat tells the others which hosts it reaches. */
  start(): void {
    const r = this.o.recoverAfterMs;
    const every = this.o.everyMs ?? (r > 0 ? Math.max(100, Math.min(1000, Math.floor(r / 20))) : 1000);
    this.timer = this.o.clock.every(every, () => void this.tick());
  }

  stop(): void {
    this.timer?.cancel();
  }

  /** What the fence does now. */
  get now(): FenceStep {
    return this.step;
  }

  /** Whether the fence stopped this host's servers since the registry last answered `healed`: the
   *  others may have recovered any of them meanwhile, so until `healed` read their placements nothing
   *  starts or thaws from what this host alone knows (fence.ts, the idle tracker's thaw check). */
  get unsettled(): boolean {
    return this.settlement.unsettled;
  }

  /** The start guard's first question (assertNotCutOff). */
  check(id: string): void {
    assertNotCutOff(this.o.contact, this.o.recoverAfterMs, this.o.log, id);
  }

  /** One check: contact read, the step taken (one at a time). */
  tick(): Promise<void> {
    this.o.contact.tick();
    this.busy ??= this.act().finally(() => (this.busy = undefined));
    return this.busy;
  }

  private async act(): Promise<void> {
    const cut = this.o.contact.cutOffForMs();
    const next = fenceStep(cut, this.o.recoverAfterMs, this.o.contact.knowsPeers());
    const was = this.step;
    this.step = next;
    if (next !== was) {
      const b = fenceBounds(this.o.recoverAfterMs);
      if (next === 'serve') this.o.log.info('registry or a peer reachable again: servers the fence froze are thawed', { frozen: this.frozen.size });
      else
        this.o.log.error(`reaching neither the registry nor any peer: running servers ${next === 'freeze' ? 'frozen' : 'stopped'} (self-fence)`, {
          cutOffMs: cut,
          freezeAfterMs: b.freezeMs,
          stopAfterMs: b.stopMs,
          recoverAfterMs: this.o.recoverAfterMs,
        });
    }
    if (next !== 'serve') this.owesHeal = true;
    if (next === 'stop') this.settlement.stopping(); // on disk before any stop: a restart keeps the rule
    if (next === 'serve') {
      // the clean-up first (copies recovered elsewhere removed), then the thaw of what is still ours
      if (this.owesHeal && this.o.contact.registryUp()) {
        try {
          if ((await this.o.healed?.()) === false) throw new Error('placements not read');
          this.owesHeal = false;
          this.settlement.settled();
          this.stopTried.clear();
        } catch (err) {
          this.o.log.error('self-fence: clean-up after the fence failed; tried again at the next check', { err });
        }
      }
      await this.thawAll();
      return;
    }
    const running = this.o.servers.running();
    if (next === 'freeze') {
      await Promise.all(
        running
          .filter((id) => !this.frozen.has(id) && !this.o.servers.frozen(id))
          .map(async (id) => {
            try {
              await this.o.servers.freeze(id);
              this.frozen.add(id);
              this.freezes++;
            } catch (err) {
              this.o.log.error('self-fence: could not freeze a server', { server: id, err });
            }
          }),
      );
      return;
    }
    await Promise.all(
      running.map(async (id) => {
        this.stopTried.add(id);
        try {
          await this.o.servers.stop(id);
          this.frozen.delete(id);
          this.stops++;
          this.o.log.warn('self-fence: server stopped', { server: id });
        } catch (err) {
          this.o.log.error('self-fence: could not stop a server', { server: id, err });
        }
      }),
    );
  }

  /** Thaws the servers the fence froze, except one it also tried to stop (its stop failed): that one
   *  stays frozen until `healed` read its placement (it may run on another host now). */
  private async thawAll(): Promise<void> {
    const ids = [...this.frozen].filter((id) => !this.stopTried.has(id));
    for (const id of ids) this.frozen.delete(id);
    const running = new Set(this.o.servers.running());
    await Promise.all(
      ids
        .filter((id) => running.has(id))
        .map((id) => this.o.servers.thaw(id).catch((err: unknown) => this.o.log.error('self-fence: could not thaw a server', { server: id, err }))),
    );
  }
}
