// A Runtime whose servers are plain processes on this host — NOT containers — for tests that
// need servers but not what containers give: the proxy's sleep/wake tests and the daemon's fast
// tier (test/helpers/daemon.ts with ROOTBOX_TEST_RUNTIME=process). It needs neither root nor runc.
//
// Each method does what it says with real processes and files: start() spawns the server's
// process (a small HTTP + WebSocket app that binds its port `bindDelay` ms after it starts, as a
// run.sh app in a woken container does; a created server's process binds nothing) and stop()
// kills it and waits for its exit; freeze()/thaw() SIGSTOP and SIGCONT it (doze); exec/execPty run a host process in the server's directory;
// stats read the process's resident memory from /proc and the disk its directory uses; delete
// removes process, directory and record. What it cannot do it does not pretend: memory and disk
// limits are recorded, not enforced (no cgroup, no disk image); egress is not counted (the
// processes share the host's network: 0); there is no user namespace or own address (ip is
// 127.0.0.1, processes run as the test's user). Tests of those use the runc runtime.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, lstatSync, rmSync } from 'node:fs';
import { freePort } from './ports.js';
import { constants, tmpdir } from 'node:os';
import { isAbsolute, join, relative } from 'node:path';
import { createRequire } from 'node:module';
import { AppError } from '../../src/errors.js';
import type {
  ExecOptions,
  ExitInfo,
  PipeProcess,
  PtyOptions,
  PtyProcess,
  Runtime,
  RuntimeServer,
  ServerSpec,
  ServerStats,
  StartGuard,
} from '../../src/runtime/index.js';

export interface ProcServer {
  rec: RuntimeServer;
  port: number;
  /** ms between process start and binding the port; -1 never binds. */
  bindDelay: number;
  child?: ChildProcess;
  /** Stopped by freeze() (SIGSTOP) until thaw() (SIGCONT). */
  frozen?: boolean;
  /** Made by create(): its directory is removed by delete(). */
  owned: boolean;
}

const APP = `
import { createServer } from 'node:http';
import { WebSocketServer } from 'ws';
const [port, delay] = [Number(process.env.PORT), Number(process.env.DELAY)];
import { createHash } from 'node:crypto';
const srv = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    if (req.url === '/echo') return res.end(body);
    res.end(JSON.stringify({ pid: process.pid, url: req.url, bodyLength: body.length, sha256: createHash('sha256').update(body).digest('hex'), forwardedFor: req.headers['x-forwarded-for'], internal: Object.keys(req.headers).filter((n) => n.startsWith('x-rootbox-')) }));
  });
});
new WebSocketServer({ server: srv }).on('connection', (ws) => ws.on('message', (m) => ws.send(m)));
if (delay >= 0) setTimeout(() => srv.listen(port, process.env.HOST || '127.0.0.1'), delay);
else setInterval(() => {}, 1 << 30);
process.on('SIGTERM', () => process.exit(0));
`;

const repo = new URL('../..', import.meta.url).pathname;

export { freePort };

const signalName = (n: number | undefined): string | null =>
  n ? ((Object.entries(constants.signals).find(([, v]) => v === n)?.[0] as string | undefined) ?? `SIG${n}`) : null;

/** Bytes a directory tree takes on disk (st_blocks, as du counts them). */
function diskUse(dir: string): number {
  let n = 0;
  const walk = (p: string) => {
    let st;
    try {
      st = lstatSync(p);
    } catch {
      return;
    }
    n += st.blocks * 512;
    if (st.isDirectory()) for (const e of readdirSync(p)) walk(join(p, e));
  };
  walk(dir);
  return n;
}

/** A loopback address of a server's own (127/8 is the host's, whole), for its app on port 80. */
const ownLoopback = () => `127.${1 + Math.floor(Math.random() * 254)}.${Math.floor(Math.random() * 256)}.${1 + Math.floor(Math.random() * 254)}`;

export class ProcessRuntime implements Runtime {
  readonly servers = new Map<string, ProcServer>();
  starts = 0;
  stops = 0;
  private base: string | undefined;

  /** `dir` holds the directories of created servers (a temp dir when absent). `apps`: a created
   *  server's process serves its app on an address of its own in 127/8, port 80, as a run.sh app
   *  in a container does (binding port 80 needs root). `mayStart`: the start guard every start()
   *  of a server that is not running awaits first, as the container runtime's (main.ts gives it). */
  constructor(private readonly opts: { dir?: string; apps?: boolean; mayStart?: StartGuard } = {}) {}

  /** Registers a sleeping server whose app will listen on 127.0.0.1:`port` (proxy tests). */
  add(id: string, slug: string, rootfs: string, port: number, opts: { bindDelay?: number } = {}): ProcServer {
    const s: ProcServer = {
      rec: { id, slug, ip: '127.0.0.1', uidBase: 0, memoryBytes: 0, diskBytes: 0, rootfs, state: 'sleeping' },
      port,
      bindDelay: opts.bindDelay ?? 0,
      owned: false,
    };
    this.servers.set(id, s);
    return s;
  }

  private dirOf(id: string): string {
    this.base ??= this.opts.dir ?? mkdtempSync(join(tmpdir(), 'rbx-proc-'));
    return join(this.base, id);
  }

  private server(id: string): ProcServer {
    const s = this.servers.get(id);
    if (!s) throw AppError.of('server_not_found', `no server ${id} on this host`);
    return s;
  }

  private running(id: string): ProcServer {
    const s = this.server(id);
    if (s.rec.state !== 'running') throw AppError.of('server_not_running', `server ${id} is ${s.rec.state}; wake it first`);
    return s;
  }

  async create(spec: ServerSpec): Promise<RuntimeServer> {
    if (this.servers.has(spec.id)) throw AppError.of('server_exists', `server ${spec.id} already exists`);
    const rootfs = join(this.dirOf(spec.id), 'rootfs');
    mkdirSync(join(rootfs, 'root'), { recursive: true });
    const s: ProcServer = {
      rec: {
        id: spec.id,
        slug: spec.slug,
        ip: this.opts.apps ? ownLoopback() : '127.0.0.1',
        uidBase: 0,
        memoryBytes: spec.memoryBytes,
        diskBytes: spec.diskBytes,
        rootfs,
        state: 'creating',
      },
      port: this.opts.apps ? 80 : 0,
      bindDelay: this.opts.apps ? 0 : -1,
      owned: true,
    };
    this.servers.set(spec.id, s);
    if (spec.start === false) s.rec.state = 'sleeping';
    else await this.spawn(s);
    return { ...s.rec };
  }

  get(id: string): RuntimeServer | undefined {
    const s = this.servers.get(id);
    return s ? { ...s.rec } : undefined;
  }

  list(): RuntimeServer[] {
    return [...this.servers.values()].map((s) => ({ ...s.rec }));
  }

  async start(id: string): Promise<void> {
    const s = this.server(id);
    if (s.child) return;
    await this.opts.mayStart?.waitFor?.(id);
    await this.opts.mayStart?.(id);
    await this.spawn(s);
  }

  private async spawn(s: ProcServer): Promise<void> {
    this.starts++;
    const child = spawn(process.execPath, ['--input-type=module', '-e', APP], {
      cwd: repo,
      env: { ...process.env, PORT: String(s.port), DELAY: String(s.bindDelay), HOST: s.rec.ip },
      stdio: 'ignore',
    });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    s.child = child;
    s.rec.state = 'running';
  }

  async stop(id: string): Promise<void> {
    const s = this.server(id);
    this.stops++;
    const child = s.child;
    s.child = undefined;
    s.frozen = false; // SIGKILL ends a stopped process too
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
    s.rec.state = 'sleeping';
  }

  /** Doze: SIGSTOP of the server's process (memory kept); resolves with its resident memory. */
  async freeze(id: string): Promise<{ memoryBytes: number }> {
    const s = this.running(id);
    s.child?.kill('SIGSTOP');
    s.frozen = true;
    return { memoryBytes: (await this.stats(id)).memoryBytes };
  }

  /** Whether a running server is frozen now (as the container runtime's: its memory, here none counted). */
  frozen(id: string): { memoryBytes: number } | undefined {
    const s = this.servers.get(id);
    return s?.frozen && s.rec.state === 'running' ? { memoryBytes: 0 } : undefined;
  }

  async thaw(id: string): Promise<void> {
    const s = this.server(id);
    if (s.frozen) s.child?.kill('SIGCONT');
    s.frozen = false;
    queueMicrotask(() => this.thawed.forEach((fn) => fn(id))); // told after the call, as the container runtime's
  }

  private readonly thawed = new Set<(id: string) => void>();

  onThawed(fn: (id: string) => void): void {
    this.thawed.add(fn);
  }

  async delete(id: string): Promise<void> {
    const s = this.server(id);
    await this.stop(id);
    this.servers.delete(id);
    if (s.owned) rmSync(this.dirOf(id), { recursive: true, force: true });
  }

  /** Records the new limits; nothing enforces them (no cgroup, no disk image). */
  async resize(id: string, limits: { memoryBytes: number; diskBytes: number }): Promise<void> {
    const s = this.server(id);
    s.rec.memoryBytes = limits.memoryBytes;
    s.rec.diskBytes = limits.diskBytes;
  }

  /** A host process in the server's directory: `cwd` is taken inside its rootfs (default /root). */
  private where(s: ProcServer, opts: ExecOptions): { cwd: string; env: NodeJS.ProcessEnv } {
    if (!opts.argv.length) throw AppError.of('invalid_argv', 'exec needs a command');
    const cwd = join(s.rec.rootfs, opts.cwd ?? '/root');
    const rel = relative(s.rec.rootfs, cwd);
    if (rel.startsWith('..') || isAbsolute(rel)) throw AppError.of('invalid_argv', 'cwd must stay inside the server');
    return { cwd, env: { PATH: process.env.PATH, HOME: join(s.rec.rootfs, 'root'), ...opts.env } };
  }

  exec(id: string, opts: ExecOptions): PipeProcess {
    const { cwd, env } = this.where(this.running(id), opts);
    const child = spawn(opts.argv[0], opts.argv.slice(1), { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
    child.stdin.on('error', () => {});
    const exited = new Promise<ExitInfo>((resolve) => {
      child.on('error', () => resolve({ code: 127, signal: null }));
      child.on('close', (code, signal) => resolve({ code, signal }));
    });
    const kill = (sig?: NodeJS.Signals) => void child.kill(sig);
    return { stdin: child.stdin, stdout: child.stdout, stderr: child.stderr, exited, kill, signalAll: async (sig) => kill(`SIG${sig}`) };
  }

  execPty(id: string, opts: PtyOptions): PtyProcess {
    const { cwd, env } = this.where(this.running(id), opts);
    const pty = createRequire(import.meta.url)('node-pty') as typeof import('node-pty');
    const p = pty.spawn(opts.argv[0], opts.argv.slice(1), {
      name: opts.term,
      cols: opts.cols,
      rows: opts.rows,
      cwd,
      env: { TERM: opts.term, ...env } as Record<string, string>,
      encoding: null,
    });
    const exited = new Promise<ExitInfo>((resolve) =>
      p.onExit(({ exitCode, signal }) => resolve(signal ? { code: null, signal: signalName(signal) } : { code: exitCode, signal: null })),
    );
    return {
      onData: (fn) => void p.onData((d) => fn(Buffer.isBuffer(d) ? d : Buffer.from(d))),
      pause: () => p.pause(),
      resume: () => p.resume(),
      write: (data) => {
        p.write(data);
        return true; // node-pty queues the input itself: never a reason to wait
      },
      onDrain: () => {},
      resize: (cols, rows) => p.resize(cols, rows),
      exited,
      kill: (sig) => p.kill(sig),
      signalAll: async (sig) => p.kill(`SIG${sig}`),
    };
  }

  /** Resident memory of the server's process (0 while it sleeps) and the disk its directory uses;
   *  no OOM kills (nothing limits it) and no egress counter (0). */
  async stats(id: string): Promise<ServerStats> {
    const s = this.server(id);
    let memoryBytes = 0;
    const pid = s.child?.pid;
    if (pid) {
      try {
        memoryBytes = Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
      } catch {
        /* exited meanwhile */
      }
    }
    return { memoryBytes, oomKills: 0, diskUsedBytes: this.diskUsedBytes(id), egressBytes: 0 };
  }

  diskUsedBytes(id: string): number {
    return diskUse(this.server(id).rec.rootfs);
  }

  async stopAll(): Promise<void> {
    for (const [id, s] of this.servers) if (s.child) await this.stop(id);
  }
}
