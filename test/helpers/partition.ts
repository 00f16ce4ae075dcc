// A packet-level network partition of one daemon on a machine where every daemon, PostgreSQL and
// the S3 server share the loopback (issue 38's partition test). The daemon is started inside a
// cgroup v2 of its own (`procs`: ProcDaemon's `cgroup` option writes its pid there before it
// execs, so every socket it ever opens belongs to it); `cut()` loads an nft table of the test's
// own that drops, for that cgroup's sockets only, every TCP packet to or from the given remote
// ports (the registry's, the peers' channels) and every packet on the given local ports (its own
// channel listener: peers' connections in, its answers out). nft's `socket cgroupv2` reads the
// sending socket in the output hook and looks the receiving socket up in the input hook, so both
// directions of a connection that was open before the cut go silent too (measured: a stream from
// a server outside the cgroup stops at the rule), as in a real partition — nothing is reset.
// `heal()` deletes the table. `remove()` also removes the cgroup (its leftover processes moved to
// the root first); the table goes at process exit too (SIGTERM and SIGINT end the process by
// exit), and tables of dead test processes go
// at the next create, so a failed run leaves no rule behind.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { run } from './run.js';
import { sleep } from './wait.js';

const PREFIX = 'rbpart';

/** Where the cgroup v2 hierarchy is mounted (its own mount on a hybrid host), relative to /sys/fs/cgroup as nft reads paths. */
function v2Root(): { abs: string; rel: string } {
  if (existsSync('/sys/fs/cgroup/cgroup.controllers')) return { abs: '/sys/fs/cgroup', rel: '' };
  if (existsSync('/sys/fs/cgroup/unified/cgroup.controllers')) return { abs: '/sys/fs/cgroup/unified', rel: 'unified/' };
  throw new Error('no cgroup v2 hierarchy mounted: the partition matches sockets by their cgroup v2');
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Tables and cgroups of partitions whose test process is gone. */
async function collectStale(root: string): Promise<void> {
  const tables = (await run('nft', ['list', 'tables', 'inet'])).stdout;
  for (const m of tables.matchAll(new RegExp(`^table inet (${PREFIX}(\\d+))$`, 'gm')))
    if (!alive(Number(m[2]))) await run('nft', ['delete', 'table', 'inet', m[1]]);
  for (const name of readdirSync(root)) {
    const m = new RegExp(`^${PREFIX}(\\d+)$`).exec(name);
    if (m && !alive(Number(m[1]))) await emptyAndRemove(join(root, name));
  }
}

/** Moves whatever still runs in `dir` to the root cgroup, then removes it. */
async function emptyAndRemove(dir: string): Promise<void> {
  if (!existsSync(dir)) return;
  const root = join(dir, '..');
  for (let i = 0; i < 50; i++) {
    try {
      rmdirSync(dir);
      return;
    } catch {
      for (const pid of readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
        try {
          writeFileSync(join(root, 'cgroup.procs'), pid);
        } catch {
          /* gone meanwhile */
        }
      }
      await sleep(50);
    }
  }
  rmdirSync(dir);
}

export interface CutSpec {
  /** Remote TCP ports the daemon may no longer reach nor hear from (the registry's, peers' channels). */
  remote: number[];
  /** The daemon's own TCP ports nobody may reach nor hear from (its channel listener). */
  local?: number[];
}

export class Partition {
  readonly table: string;
  /** The daemon's cgroup v2 directory; its `cgroup.procs` is what the daemon writes its pid to. */
  readonly dir: string;
  private readonly rel: string;
  private cutNow = false;
  private readonly onExit = () => {
    try {
      execFileSync('nft', ['delete', 'table', 'inet', this.table], { stdio: 'ignore' });
    } catch {
      /* not there */
    }
  };

  private constructor() {
    const root = v2Root();
    this.table = `${PREFIX}${process.pid}`;
    this.dir = join(root.abs, this.table);
    this.rel = `${root.rel}${this.table}`;
  }

  /** A partition of this test process (one at a time): its cgroup made, stale ones removed. */
  static async create(): Promise<Partition> {
    const p = new Partition();
    await collectStale(join(p.dir, '..'));
    mkdirSync(p.dir, { recursive: true });
    process.on('exit', p.onExit);
    // a file the runner ends (its time limit: SIGTERM) runs the exit handlers too
    for (const sig of ['SIGTERM', 'SIGINT'] as const)
      if (process.listenerCount(sig) === 0) process.once(sig, () => process.exit(sig === 'SIGTERM' ? 143 : 130));
    return p;
  }

  get procs(): string {
    return join(this.dir, 'cgroup.procs');
  }

  get isCut(): boolean {
    return this.cutNow;
  }

  /** Drops the daemon's packets as `spec` says (replacing an earlier cut). */
  async cut(spec: CutSpec): Promise<void> {
    const set = (ports: number[]) => `{ ${ports.join(', ')} }`;
    const sock = `socket cgroupv2 level 1 "${this.rel}"`;
    const rules = (dir: 'out' | 'in') => {
      // out: the daemon's own packets; in: packets for its sockets (looked up by nft)
      const remote = dir === 'out' ? 'dport' : 'sport';
      const local = dir === 'out' ? 'sport' : 'dport';
      const r = [`${sock} tcp ${remote} ${set(spec.remote)} counter drop`];
      if (spec.local?.length) r.push(`${sock} tcp ${local} ${set(spec.local)} counter drop`);
      return r.join('\n    ');
    };
    // one nft transaction: the earlier cut replaced with no moment between where packets flow
    // (two commands left a gap in which a cut-off daemon could reach its registry again)
    const text = `table inet ${this.table}
delete table inet ${this.table}
table inet ${this.table} {
  chain out {
    type filter hook output priority filter; policy accept;
    ${rules('out')}
  }
  chain in {
    type filter hook input priority filter; policy accept;
    ${rules('in')}
  }
}
`;
    const r = await run('nft', ['-f', '-'], { input: text });
    if (r.code !== 0) throw new Error(`nft refused the partition: ${r.stderr}\n${text}`);
    this.cutNow = true;
  }

  /** Packets dropped so far by the current cut (its counters). */
  async dropped(): Promise<number> {
    const r = await run('nft', ['list', 'table', 'inet', this.table]);
    return [...r.stdout.matchAll(/counter packets (\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
  }

  /** Every packet flows again. */
  async heal(): Promise<void> {
    await run('nft', ['delete', 'table', 'inet', this.table]);
    this.cutNow = false;
  }

  /** The table and the cgroup gone (call after the daemon stopped; leftovers are moved out). */
  async remove(): Promise<void> {
    await this.heal();
    await emptyAndRemove(this.dir);
    process.off('exit', this.onExit);
  }
}
