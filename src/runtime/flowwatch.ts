// New connections dropped by a server's bounds (netbounds.ts), made visible. Every couple of
// seconds the watch reads every server's two drop counters (one `nft list counters` for the
// table), adds what grew to the metric rootbox_egress_flows_dropped_total, and tells the server's
// user in its /var/log/rootbox.log (oom.ts appendRootboxLog: never through a user's symlink) — at
// most one line per server per runtime.egress.logEvery, carrying what was dropped since its last
// line: a spraying server costs the daemon one small write a minute, not one per drop.

import type { Logger } from '../log/index.js';
import { Periodic } from './periodic.js';
import { metrics } from '../metrics/index.js';
import { readDrops, type FlowDrops } from './netbounds.js';
import { appendRootboxLog } from './oom.js';
import type { RuntimeServer } from './types.js';

/** The words every drop line of rootbox.log starts its message with. */
export const DROP_MARK = 'network: new connections dropped:';

export interface FlowWatchOptions {
  /** The servers as the runtime sees them now. */
  servers: () => RuntimeServer[];
  /** The nftables table (`inet <table>`). */
  table: string;
  /** Least time between two lines in one server's rootbox.log (ms). */
  logEvery: number;
  log: Logger;
  /** Poll period (default 2 s). */
  everyMs?: number;
  now?: () => number;
}

interface Seen {
  id: string;
  counters: FlowDrops;
  /** Drops not told to the server yet. */
  untold: FlowDrops;
  lastLine: number;
}

export class FlowWatch extends Periodic {
  private readonly seen = new Map<string, Seen>();
  /** Lines written to servers' rootbox.log since start (for tests). */
  written = 0;

  constructor(private readonly o: FlowWatchOptions) {
    super('flow watch', o);
  }

  protected async look(): Promise<void> {
    const drops = await readDrops(this.o.table);
    const now = (this.o.now ?? Date.now)();
    const servers = this.o.servers();
    const ips = new Set(servers.map((s) => s.ip));
    for (const ip of this.seen.keys()) if (!ips.has(ip)) this.seen.delete(ip);
    for (const s of servers) {
      const c = drops.get(s.ip) ?? { flows: 0, rate: 0 };
      let seen = this.seen.get(s.ip);
      if (!seen || seen.id !== s.id) {
        // at the daemon's start the drops so far were told by the daemon before it
        const base = this.first ? c : { flows: 0, rate: 0 };
        seen = { id: s.id, counters: base, untold: { flows: 0, rate: 0 }, lastLine: -Infinity };
        this.seen.set(s.ip, seen);
      }
      // a counter made anew (the server's chain re-added) starts at 0
      const grew = {
        flows: c.flows >= seen.counters.flows ? c.flows - seen.counters.flows : c.flows,
        rate: c.rate >= seen.counters.rate ? c.rate - seen.counters.rate : c.rate,
      };
      seen.counters = c;
      if (grew.flows) metrics.flowsDropped('open', grew.flows);
      if (grew.rate) metrics.flowsDropped('rate', grew.rate);
      seen.untold.flows += grew.flows;
      seen.untold.rate += grew.rate;
      if (seen.untold.flows + seen.untold.rate > 0 && now - seen.lastLine >= this.o.logEvery) {
        await this.tell(s, seen.untold, now);
        seen.untold = { flows: 0, rate: 0 };
        seen.lastLine = now;
      }
    }
  }

  private async tell(s: RuntimeServer, d: FlowDrops, now: number): Promise<void> {
    const at = new Date(now).toISOString().replace(/\.\d+Z$/, 'Z');
    const b = s.net;
    const why = [
      d.flows ? `${d.flows} because ${b ? `${b.flows} were open (this server's most)` : 'too many were open'}` : '',
      d.rate ? `${d.rate} because they came faster than ${b ? `${b.newFlowsPerSecond} per second` : "this server's rate"}` : '',
    ]
      .filter(Boolean)
      .join(', ');
    const ok = await appendRootboxLog(s, `[rootbox ${at}] ${DROP_MARK} ${why}\n`);
    this.written++;
    this.o.log.warn('server connections dropped by its bounds', { server: s.id, open: d.flows, rate: d.rate, logged: ok });
  }
}
