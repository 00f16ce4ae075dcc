// The real daemon as a child process (`rootbox serve` from an esbuild bundle made once per test
// process, the way bin/rootbox runs dist/rootbox.js), with a data dir, bridge, subnet, nft
// tables, uid ranges and port pool of its own, so a test can SIGKILL it and start it again on
// the same data dir (and every restart runs the same code, even while the tree is edited). remove() takes down everything it ever
// made: servers (runc containers, mounts, loop devices, veths, cgroups), network and data dir.

import { withToken } from '../../helpers/cluster.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { unpin } from '../../../src/runtime/freezer.js';
import { run } from '../../helpers/run.js';

const root = new URL('../../../', import.meta.url).pathname;
let bundle: Promise<string> | undefined;

/** Bundles src/cli.ts like build.mjs, once per process, beside dist/rootbox.js (the same layout:
 *  node_modules and dist/bin resolve as in production) under a name of its own. */
function bundled(): Promise<string> {
  bundle ??= (async () => {
    const native = join(root, 'scripts', 'native.mjs');
    if (existsSync(native)) (await import(native)).buildNative(); // the runtime's C helpers, when missing
    const { build } = await import('esbuild');
    const outfile = bundleOf(process.pid);
    await build({
      entryPoints: [join(root, 'src/cli.ts')],
      outfile,
      bundle: true,
      platform: 'node',
      target: 'node20',
      format: 'esm',
      sourcemap: true,
      external: ['lmdb', 'node-pty', 'ssh2', 'cpu-features', 'msgpackr-extract'],
      banner: { js: "import { createRequire as __rbxCreateRequire } from 'node:module'; const require = __rbxCreateRequire(import.meta.url);" },
      logLevel: 'warning',
    });
    return outfile;
  })();
  return bundle;
}

export interface ProcDaemonOptions {
  /** Extra config merged over the defaults (JSON config file); `hosting` merges one level deep. */
  config?: Record<string, unknown>;
  /** A cgroup's `cgroup.procs` the daemon joins before it execs (every socket it opens is that
   *  cgroup's: test/helpers/partition.ts matches them with nft). */
  cgroupProcs?: string;
}

const FIRST = 150;
const SLOTS = 100;
const lockOf = (n: number) => join(tmpdir(), `rbx-procdaemon-${n}.lock`);

const cfgOf = (n: number, holder: number) => join(tmpdir(), `rbx-proc-${n}-${holder}.json`);
const bundleOf = (holder: number) => join(root, 'dist', `procdaemon-${holder}.js`);

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A slot number no other live ProcDaemon on this host holds (test files of several checkouts may
 *  run at once), taken by creating its lock file; the lock of a dead process is taken over and
 *  its previous holder returned, whose leftovers start() removes first. */
function takeSlot(): { n: number; stale?: number } {
  for (let i = 0; i < SLOTS; i++) {
    const n = FIRST + ((process.pid + i) % SLOTS);
    try {
      writeFileSync(lockOf(n), String(process.pid), { flag: 'wx' });
      return { n };
    } catch {
      const holder = Number(readFileSync(lockOf(n), 'utf8') || 0);
      if (holder > 0 && isAlive(holder)) continue;
      writeFileSync(lockOf(n), String(process.pid));
      return { n, stale: holder };
    }
  }
  throw new Error('no free ProcDaemon slot');
}

/** Processes with exactly this argument (a daemon is found by its own config file). */
function pidsWithArg(arg: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').includes(arg)) out.push(Number(name));
    } catch {
      /* gone */
    }
  }
  return out;
}

/** Removes everything a ProcDaemon of slot n held by `holder` made: its daemon if it still runs
 *  (its test process died without cleaning up), containers, mounts, cgroups, network, files. */
async function cleanSlot(n: number, holder: number): Promise<void> {
  const cfgFile = cfgOf(n, holder);
  let dataDir: string | undefined;
  try {
    dataDir = (JSON.parse(readFileSync(cfgFile, 'utf8')) as { dataDir: string }).dataDir;
  } catch {
    dataDir = undefined;
  }
  const running = (pid: number) => {
    try {
      return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z');
    } catch {
      return false;
    }
  };
  for (const pid of pidsWithArg(cfgFile)) {
    process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 500 && running(pid); i++) await new Promise((r) => setTimeout(r, 10));
  }
  if (dataDir && existsSync(dataDir)) {
    const runcRoot = join(dataDir, 'runc');
    const list = await run('runc', ['--root', runcRoot, 'list', '-q']);
    for (const id of list.stdout.split('\n').filter(Boolean)) {
      await run('runc', ['--root', runcRoot, 'kill', '--all', id, 'KILL']);
      await run('runc', ['--root', runcRoot, 'delete', '--force', id]);
    }
    const servers = join(dataDir, 'servers');
    const ids = existsSync(servers) ? readdirSync(servers) : [];
    for (const pid of pidsWithArg(join(dataDir, 'lxcfs'))) process.kill(pid, 'SIGKILL'); // outlives its daemon by design
    for (const m of mountsUnder(dataDir).reverse()) await run('umount', ['-l', m]);
    unpin(`/rbk${n}`); // the freezer pin its runtime kept (runtime/freezer.ts), which a SIGKILL leaves
    for (const id of [...ids, '']) removeCgroups(`rbk${n}`, id);
    rmSync(dataDir, { recursive: true, force: true });
  }
  await run('nft', ['delete', 'table', 'inet', `rbk${n}`]);
  await run('nft', ['delete', 'table', 'bridge', `rbk${n}`]);
  await run('ip', ['link', 'del', `rbk${n}`]);
  for (const f of [cfgFile, bundleOf(holder), `${bundleOf(holder)}.map`]) rmSync(f, { force: true });
}

/** Leftovers of ProcDaemons whose test process died (killed by a time limit, Ctrl-C), once. */
let collected: Promise<void> | undefined;
function collectStale(): Promise<void> {
  collected ??= (async () => {
    for (const name of readdirSync(tmpdir())) {
      const m = /^rbx-procdaemon-(\d+)\.lock$/.exec(name);
      if (!m) continue;
      const n = Number(m[1]);
      const holder = Number(readFileSync(lockOf(n), 'utf8') || 0);
      if (holder === process.pid || (holder > 0 && isAlive(holder))) continue;
      await cleanSlot(n, holder);
      rmSync(lockOf(n), { force: true });
    }
  })();
  return collected;
}

export class ProcDaemon {
  readonly dataDir: string;
  readonly bridge: string;
  readonly table: string;
  readonly cfgFile: string;
  child?: ChildProcess;
  http = 0;
  https = 0;
  ssh = 0;
  /** Every log line of every run, parsed (non-JSON lines as {raw}). */
  readonly logs: Record<string, any>[] = [];
  private out = '';

  /** This daemon's slot: its bridge, subnet, table, uid ranges and port pool derive from it. */
  readonly n: number;
  /** Public ports /expose hands out (8 of them, this daemon's alone). */
  readonly pool: [number, number];

  /** The dead process whose slot this one took over (its leftovers go before the first start). */
  private stale?: number;

  constructor(readonly opts: ProcDaemonOptions = {}) {
    const slot = takeSlot();
    this.n = slot.n;
    this.stale = slot.stale;
    const n = this.n;
    this.pool = [26000 + (n - FIRST) * 10, 26000 + (n - FIRST) * 10 + 7];
    this.dataDir = mkdtempSync(join(tmpdir(), 'rbx-proc-'));
    this.bridge = `rbk${n}`;
    this.table = `rbk${n}`;
    this.cfgFile = cfgOf(n, process.pid);
    const cfg = {
      dataDir: this.dataDir,
      runDir: join(this.dataDir, 'run'), // its whereabouts (admin/whereabouts.ts) go with it, a SIGKILL included
      publicIp: '127.0.0.1',
      http: { host: '127.0.0.1', port: 0 },
      https: { host: '127.0.0.1', port: 0 },
      ssh: { host: '127.0.0.1', port: 0 },
      metrics: { listen: '127.0.0.1:0' },
      shutdownTimeout: '2s',
      log: { level: 'debug' },
      runtime: {
        imageDir: process.env.ROOTBOX_IMAGE_DIR ?? join(root, 'var', 'images'),
        bridge: this.bridge,
        subnet: `10.194.${n}.0/24`,
        nftTable: this.table,
        uidStart: 3_200_000_000 + n * 65536 * 32,
        uidRanges: 32,
        stopGrace: '1s',
      },
      ...opts.config,
      hosting: { portPool: this.pool.join('-'), ...(opts.config?.hosting as object) },
      proxy: { dozeTimeout: 0, ...(opts.config?.proxy as object) }, // sleep tests test the stop; doze tests turn it on
      ...(opts.config?.cluster ? { cluster: withToken(opts.config.cluster) } : {}), // the tests' cluster token
    };
    writeFileSync(this.cfgFile, JSON.stringify(cfg, null, 2));
  }

  get running(): boolean {
    return !!this.child && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Starts the daemon and resolves once its API (edge) and SSH listen. */
  async start(timeoutMs = 120_000): Promise<void> {
    this.out = '';
    this.http = this.https = this.ssh = 0;
    if (this.stale !== undefined) await cleanSlot(this.n, this.stale);
    this.stale = undefined;
    await collectStale();
    // setpriv: the daemon is SIGKILLed if this test process dies without cleaning up
    const node = [process.execPath, '--enable-source-maps', await bundled(), 'serve', '--config', this.cfgFile];
    const direct = existsSync('/usr/bin/setpriv') ? ['/usr/bin/setpriv', '--pdeathsig', 'KILL', '--', ...node] : node;
    const joined = this.opts.cgroupProcs ? ['/bin/sh', '-c', 'echo $$ > "$0" && exec "$@"', this.opts.cgroupProcs, ...direct] : direct;
    const [cmd, ...args] = joined;
    const child = spawn(cmd, args, {
      cwd: root,
      env: { ...process.env, ROOTBOX_CONFIG: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    let buf = '';
    const onLine = (l: string) => {
      let rec: Record<string, any>;
      try {
        rec = JSON.parse(l);
      } catch {
        rec = { raw: l };
      }
      rec.pid = child.pid;
      this.logs.push(rec);
      if (rec.msg === 'edge listening') {
        this.http = rec.http;
        this.https = rec.https;
      }
      if (rec.msg === 'ssh listening') this.ssh = rec.port;
    };
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      this.out += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        onLine(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    });
    child.stderr!.on('data', (d: Buffer) => {
      this.out += d.toString();
      for (const l of d.toString().split('\n')) if (l.trim()) this.logs.push({ raw: l, stderr: true, pid: child.pid });
    });
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`daemon did not start in ${timeoutMs} ms:\n${this.out.slice(-4000)}`)), timeoutMs);
      const check = setInterval(() => {
        const said = new Set(this.logs.filter((r) => r.pid === child.pid).map((r) => r.msg));
        // started: the admin socket comes last (in cluster mode after the host joined the registry)
        if (said.has('ssh listening') && said.has('edge listening') && (said.has('admin channel listening') || said.has('admin channel off'))) {
          clearInterval(check);
          clearTimeout(t);
          resolve();
        }
      }, 20);
      child.once('exit', (code, sig) => {
        clearInterval(check);
        clearTimeout(t);
        reject(new Error(`daemon exited (${code ?? sig}) while starting:\n${this.out.slice(-4000)}`));
      });
    });
  }

  /** SIGKILL, as a crash: only the daemon process (its helpers, like under KillMode=process, live on). */
  async kill(): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise((r) => c.once('exit', r));
    c.kill('SIGKILL');
    await gone;
  }

  async stop(): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise((r) => c.once('exit', r));
    c.kill('SIGTERM');
    const t = setTimeout(() => c.kill('SIGKILL'), 10_000);
    await gone;
    clearTimeout(t);
  }

  /** Log lines of the current (last started) run. */
  current(): Record<string, any>[] {
    return this.logs.filter((r) => r.pid === this.child?.pid);
  }

  /** Everything this daemon ever made on the host, removed (also after a failed test). */
  async remove(): Promise<void> {
    await this.kill();
    await cleanSlot(this.n, process.pid);
    rmSync(lockOf(this.n), { force: true });
  }
}

/** Mount points under dir, in mount order. */
export function mountsUnder(dir: string): string[] {
  const out: string[] = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    if (f.length < 5) continue;
    const p = f[4].replace(/\\(\d{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
    if (p.startsWith(dir + '/')) out.push(p);
  }
  return out;
}

const CGROUP = '/sys/fs/cgroup';

/** cgroup directories of a server id, across hierarchies (v1 or v2). */
export function cgroupsOf(table: string, id: string): string[] {
  if (existsSync(join(CGROUP, 'cgroup.controllers'))) return [join(CGROUP, table, id)].filter(existsSync);
  return readdirSync(CGROUP)
    .map((c) => join(CGROUP, c, table, id))
    .filter(existsSync);
}

/** The cgroups of server `id` of the daemon of nft table `table` (`''`: that daemon's parent), when empty. */
function removeCgroups(table: string, id: string): void {
  for (const d of cgroupsOf(table, id)) {
    try {
      rmdirSync(d);
    } catch {
      /* busy or gone */
    }
  }
}
