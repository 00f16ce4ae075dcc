// Notices a server whose network vanished under it and repairs it, instead of leaving it to answer
// 502 for good: a host-side veth deleted by someone (an operator, a second daemon's cleanup) is
// seen at once (`ip -o monitor link` reports the deletion) and on every sweep (each `sweepMs`, and
// when asked: check(id)); its namespace is wired to the bridge again (Network.rewire), or, when
// that fails, a running server is restarted (its start makes namespaces and veth anew). A missing
// egress element (nft) is added again on the sweep (the table itself is set up again when gone).
// Every repair is logged.

import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Logger } from '../log/index.js';
import type { NetBounds } from './netbounds.js';
import type { Network, NsPaths } from './network.js';

export interface WatchedServer {
  id: string;
  ip: string;
  ns: NsPaths;
  running: boolean;
  /** Its connection bounds as applied (an egress element restored carries them again). */
  net: NetBounds;
}

export interface NetWatchDeps {
  net: Network;
  log: Logger;
  /** Servers whose namespaces exist (made at create, kept asleep). */
  servers(): WatchedServer[];
  /** Runs fn after every earlier operation on the server (the runtime's queue). */
  serial<T>(id: string, fn: () => Promise<T>): Promise<T>;
  /** Stops and starts a running server (its start makes its namespaces again). */
  restart(id: string): Promise<void>;
  sweepMs?: number;
}

export class NetWatch {
  private monitor?: ChildProcess;
  private timer?: NodeJS.Timeout;
  private stopped = false;

  constructor(private readonly d: NetWatchDeps) {}

  start(): void {
    // setpriv (util-linux, like nsenter): the monitor is killed with the daemon, even a kill -9
    const m = spawn('setpriv', ['--pdeathsig', 'KILL', 'ip', '-o', 'monitor', 'link'], { stdio: ['ignore', 'pipe', 'ignore'] });
    m.on('error', (err) => this.d.log.warn('ip monitor link did not start; vanished veths are found by the sweep only', { err }));
    createInterface({ input: m.stdout! }).on('line', (line) => {
      const name = /^Deleted\s+\d+:\s+([^:@\s]+)/.exec(line)?.[1];
      if (!name || !this.d.net.ownVeth(name)) return;
      const s = this.d.servers().find((x) => this.d.net.vethOf(x.ip) === name);
      if (s) void this.check(s.id);
    });
    m.once('close', () => {
      if (!this.stopped) this.d.log.warn('ip monitor link ended; vanished veths are found by the sweep only');
    });
    this.monitor = m;
    this.timer = setInterval(() => void this.sweep(), this.d.sweepMs ?? 30_000);
    this.timer.unref();
    void this.sweep(); // an adopted server may have lost its veth while no daemon ran
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.monitor?.kill();
  }

  /** Repairs the server's veth if it is gone; resolves true when it repaired something. */
  check(id: string): Promise<boolean> {
    return this.d
      .serial(id, async () => {
        const s = this.d.servers().find((x) => x.id === id);
        if (!s || this.stopped || this.d.net.hasVeth(s.ip)) return false;
        const veth = this.d.net.vethOf(s.ip);
        this.d.log.warn('server network: its veth vanished; wiring it again', { server: id, veth });
        try {
          await this.d.net.rewire(s.ip, s.ns);
          this.d.log.info('server network repaired', { server: id, veth, how: 'rewired' });
          return true;
        } catch (err) {
          this.d.log.error('server network: rewiring failed', { server: id, veth, err });
        }
        if (!s.running) return false; // a sleeping server's next start makes its namespaces again
        return true;
      })
      .then(async (again) => {
        const s = this.d.servers().find((x) => x.id === id);
        if (!again || !s || this.d.net.hasVeth(s.ip)) return again;
        await this.d.restart(id);
        this.d.log.info('server network repaired', { server: id, veth: this.d.net.vethOf(s.ip), how: 'restarted' });
        return true;
      });
  }

  /** Checks every server's veth and egress element. */
  async sweep(): Promise<void> {
    const servers = this.d.servers();
    for (const s of servers) await this.check(s.id).catch((err) => this.d.log.error('server network repair failed', { server: s.id, err }));
    let have = await this.d.net.egressIps();
    if (!have && servers.length) {
      this.d.log.warn('server network: the nft table is gone; setting it up again', { table: this.d.net.table });
      await this.d.net.setup().catch((err) => this.d.log.error('server network: nft setup failed', { err }));
      have = new Set();
    }
    for (const s of servers) {
      if (have?.has(s.ip) || this.stopped) continue;
      await this.d.net
        .addServer(s.ip, s.net)
        .then(() => this.d.log.info('server network repaired', { server: s.id, how: 'egress element added' }))
        .catch((err) => this.d.log.error('server network: egress element not restored', { server: s.id, err }));
    }
  }
}
