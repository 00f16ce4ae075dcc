// The container runtime: servers as runc containers with their own disk, network identity and
// uid range. Owns the lifecycle (create, start/wake, stop/sleep, delete, resize), exec, stats and
// the in-memory view of every server; reconcile.ts brings runc and the store together at boot.
// Operations on one server are serialised; different servers proceed in parallel.
// Its store record holds what it owns (address, uid range, desired state). Slug and limits are
// given in the spec (create) and at resize and kept where they act: the bundle's config.json
// (hostname, memory limit) and the disk image's size — read back when a runtime starts anew.
// Parking of sleeping servers (a `created` container kept for a fast wake) is park.ts.

import { alive, sleep } from './proc.js';
import { chmodSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { RuntimeConfig } from '../config/index.js';
import { AppError, InternalError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { RuntimeRecord, RuntimeStore } from '../store/index.js';
import { cgroupPath, ociSpec } from './spec.js';
import { applyDeferredGrow, destroyDisk, diskPaths, diskUsed, growDisk, mountTable, mountRootfs, makeDisk, syncInitFiles } from './disk.js';
import { pipeExec, ptyExec, type Wrapping } from './exec.js';
import { INIT_MOUNT } from './supervisor.js';
import { memoryStats, removeCgroup } from './cgroup.js';
import { freeze, thaw } from './freezer.js';
import { ensureLxcfsDir } from './lxcfs.js';
import { Network, nsPaths } from './network.js';
import { Runc } from './runc.js';
import { personalise, writeDurably } from './bundle.js';
import { Parking } from './park.js';
import { serverLower } from './images.js';
import type { ExecOptions, PipeProcess, PtyOptions, PtyProcess, Runtime, RuntimeServer, ServerSpec, ServerState, ServerStats } from './types.js';

export interface RuntimeDeps {
  dataDir: string;
  cfg: RuntimeConfig;
  store: RuntimeStore;
  log: Logger;
  /** Rootfs of the current recipe's base image (`<imageDir>/<name>-<hash>/rootfs`): the idmapped
   *  lower layer of new servers. An existing server keeps the image its record names (images.ts),
   *  from the same image dir, whatever the current recipe is. */
  image: string;
  /** Compiled idmapped-mount helper. */
  helper: string;
  /** Directory bind-mounted at /run/rootbox (tini + supervisor). */
  initDir: string;
  /** Host path of the rbx-exec wrapper in initDir (execwrap.ts); without it execs run unwrapped. */
  execWrapper?: string;
}

const ID = /^srv_[A-Za-z0-9_-]{1,60}$/;
/** How long a create may stay uncommitted when the caller does not commit it itself. */
const CREATE_DEADLINE_MS = 10 * 60_000;
const SLUG = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const MiB = 1024 * 1024;

/** What a server was given (ServerSpec without id), as applied on the host. */
type Applied = Pick<ServerSpec, 'slug' | 'memoryBytes' | 'diskBytes'>;

export class ContainerRuntime implements Runtime {
  readonly net: Network;
  readonly runc: Runc;
  readonly servers = new Map<string, RuntimeServer>();
  private readonly queues = new Map<string, Promise<unknown>>();
  /** Ids reserved (reserve) whose create has not started yet. */
  private readonly reserved = new Set<string>();
  /** Servers parked asleep (park.ts). */
  private readonly parking: Parking;
  /** Called with each step of a start and its duration (bench/wake); unset, steps are not timed. */
  trace?: (step: string, ms: number) => void;

  constructor(readonly deps: RuntimeDeps) {
    this.net = new Network(deps.cfg);
    this.runc = new Runc(join(deps.dataDir, 'runc'));
    this.parking = new Parking({
      deps,
      runc: this.runc,
      net: this.net,
      serverDir: (id) => this.serverDir(id),
      serial: <T>(id: string, fn: () => Promise<T>) => this.serial(id, fn),
      state: (id) => this.servers.get(id)?.state,
      createContainer: (rec) => this.createContainer(rec),
      launch: <T>(rec: RuntimeRecord, op: Promise<T>, meanwhile: () => void) => this.launch(rec, op, meanwhile),
      step: <T>(name: string, fn: () => Promise<T>) => this.step(name, fn),
      halt: (id) => this.halt(this.record(id), 0),
    });
  }

  serverDir(id: string): string {
    return join(this.deps.dataDir, 'servers', id);
  }

  /** Runs fn after every earlier operation on the same server. */
  serial<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.queues.get(id) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => {});
    this.queues.set(id, tail);
    void tail.then(() => {
      if (this.queues.get(id) === tail) this.queues.delete(id);
    });
    return next;
  }

  /** Sets the in-memory view of a server: its state, and what it was given (`applied`; by
   *  default as the view already has it, else as its bundle and disk say). */
  view(rec: RuntimeRecord, state: ServerState, applied: Applied = this.applied(rec.id)): RuntimeServer {
    const s: RuntimeServer = {
      id: rec.id,
      slug: applied.slug,
      ip: rec.ip,
      uidBase: rec.uidBase,
      memoryBytes: applied.memoryBytes,
      diskBytes: applied.diskBytes,
      rootfs: diskPaths(this.serverDir(rec.id)).rootfs,
      state,
    };
    this.servers.set(rec.id, s);
    return s;
  }

  /** Slug and limits as applied: from the view, or (a new runtime instance) from the server's
   *  bundle (hostname, memory limit) and disk image (size). */
  applied(id: string): Applied {
    const known = this.servers.get(id);
    if (known) return { slug: known.slug, memoryBytes: known.memoryBytes, diskBytes: known.diskBytes };
    const file = join(this.serverDir(id), 'bundle', 'config.json');
    let spec: { hostname?: unknown; linux?: { resources?: { memory?: { limit?: unknown } } } };
    try {
      spec = JSON.parse(readFileSync(file, 'utf8'));
    } catch (e) {
      throw new InternalError('a server bundle cannot be read', { server: id, file }, { cause: e });
    }
    const slug = spec.hostname;
    const memoryBytes = spec.linux?.resources?.memory?.limit;
    if (typeof slug !== 'string' || typeof memoryBytes !== 'number')
      throw new InternalError('a server bundle names no hostname or memory limit', { server: id, file });
    return { slug, memoryBytes, diskBytes: statSync(diskPaths(this.serverDir(id)).img).size };
  }

  private setState(id: string, state: ServerState): void {
    const s = this.servers.get(id);
    if (s) s.state = state;
  }

  private record(id: string): RuntimeRecord {
    const rec = this.deps.store.get(id);
    if (!rec) throw AppError.of('server_not_found', `no server ${id} on this host`);
    return rec;
  }

  /** Writes the OCI bundle of a server (by default with the slug and memory limit it has now).
   *  The file is synced before it replaces the old one: it is where the applied limit is kept. */
  writeBundle(rec: RuntimeRecord, applied: Pick<Applied, 'slug' | 'memoryBytes'> = this.applied(rec.id)): void {
    const bundle = join(this.serverDir(rec.id), 'bundle');
    mkdirSync(bundle, { recursive: true, mode: 0o700 });
    const p = diskPaths(this.serverDir(rec.id));
    syncInitFiles(this.deps.initDir, p); // the init bind comes from the server's own disk (disk.ts)
    const spec = ociSpec({
      id: rec.id,
      slug: applied.slug,
      rootfs: p.rootfs,
      uidBase: rec.uidBase,
      memoryBytes: applied.memoryBytes,
      initDir: p.init,
      limits: this.deps.cfg,
      lxcfsDir: ensureLxcfsDir(this.deps.dataDir),
      ns: nsPaths(this.serverDir(rec.id)),
    });
    writeDurably(join(bundle, 'config.json'), JSON.stringify(spec));
  }

  /** The rootfs of the image the server was created from (its overlay's lower layer). */
  lower(rec: RuntimeRecord): string {
    const current = dirname(this.deps.image);
    return serverLower(rec.image, { imageDir: dirname(current), name: basename(current).replace(/-[0-9a-f]{12}$/, '') });
  }

  /** Times one step of a start when `trace` is set. */
  async step<T>(name: string, fn: () => Promise<T>): Promise<T> {
    const trace = this.trace;
    if (!trace) return fn();
    const t0 = performance.now();
    try {
      return await fn();
    } finally {
      trace(name, performance.now() - t0);
    }
  }

  /** Mounts and namespaces when missing (kept across sleep: a wake finds them) → runc create →
   *  runc start; a parked server (park()) only gets its start. Leaves no half-made container.
   *  `meanwhile` runs once, while runc create (or the parked start) runs (start's synced store
   *  write, off the critical path), or at once when there is nothing to boot. */
  async boot(rec: RuntimeRecord, meanwhile: () => void = () => {}): Promise<void> {
    const parked = await this.parking.wake(rec, meanwhile);
    if (parked.started) return;
    if (parked.ran) meanwhile = () => {};
    if (this.runc.exists(rec.id)) {
      const st = await this.runc.state(rec.id);
      if (st?.status === 'running') return meanwhile();
      if (st) await this.runc.delete(rec.id, true);
    }
    const pid = await this.launch(rec, this.createContainer(rec), meanwhile);
    try {
      await this.step('runc start', () => this.runc.start(rec.id, pid));
    } catch (e) {
      await this.runc.delete(rec.id, true).catch(() => {});
      throw e;
    }
  }

  /** Awaits `op` (a runc create or start under way) with `meanwhile` run beside it; when either
   *  fails the container is deleted. */
  async launch<T>(rec: RuntimeRecord, op: Promise<T>, meanwhile: () => void): Promise<T> {
    try {
      const t0 = performance.now();
      meanwhile(); // the runc step is under way by now
      this.trace?.('store (beside runc)', performance.now() - t0);
    } catch (e) {
      await op.then(() => this.runc.delete(rec.id, true)).catch(() => {});
      throw e;
    }
    try {
      return await op;
    } catch (e) {
      await this.runc.delete(rec.id, true).catch(() => {});
      throw e;
    }
  }

  /** Mounts and namespaces checked (made when missing), then runc create; init's pid. */
  async createContainer(rec: RuntimeRecord): Promise<number> {
    const dir = this.serverDir(rec.id);
    const table = mountTable(); // read once: what mountRootfs mounts is none of the namespaces' paths
    await this.step('mounts (kept)', () => mountRootfs(diskPaths(dir), this.deps.helper, this.lower(rec), rec.uidBase, table));
    await this.step('namespaces + veth (kept)', () => this.net.ensureNamespaces(rec.ip, rec.uidBase, nsPaths(dir), table));
    return this.step('runc create', () => this.runc.create(rec.id, join(dir, 'bundle')));
  }

  /** Parks a stopped server (park.ts; runtime.parkOnSleep): a failure leaves it unparked. */
  park(rec: RuntimeRecord): Promise<void> {
    return this.parking.park(rec);
  }

  /** Parked servers: since when, and the memory their waiting init holds. */
  parked(): { id: string; since: number; memoryBytes: number }[] {
    return this.parking.list();
  }

  /** A parked server's container removed (it stays asleep, wakes cold); false when not parked. */
  unpark(id: string): Promise<boolean> {
    return this.parking.unpark(id);
  }

  /** Adopts a `created` container found at start-up as parked (reconcile). */
  adoptParked(id: string): void {
    this.parking.adopt(id);
  }

  /** The runtime record of a new server, written pending before anything exists on the host: a
   *  crash from then on leaves a record that reconcile tears down with all it holds. */
  reserve(spec: ServerSpec): void {
    this.allocate(spec);
    this.reserved.add(spec.id);
  }

  private allocate(spec: ServerSpec): RuntimeRecord {
    if (!ID.test(spec.id)) throw AppError.of('invalid_server_id', 'server id must look like srv_<letters, digits, _ or ->');
    if (!SLUG.test(spec.slug)) throw AppError.of('invalid_slug', 'slug must be a DNS label: lowercase letters, digits and inner hyphens, at most 63');
    if (!(spec.memoryBytes >= 32 * MiB)) throw AppError.of('invalid_memory', 'memoryBytes must be at least 32 MiB');
    if (!(spec.diskBytes >= 64 * MiB)) throw AppError.of('invalid_disk', 'diskBytes must be at least 64 MiB');
    const got = this.deps.store.allocate(
      {
        id: spec.id,
        desired: 'running',
        createdAt: Date.now(),
        pending: spec.pendingUntil ?? Date.now() + CREATE_DEADLINE_MS,
        image: basename(dirname(this.deps.image)),
      }, // the current tag
      { uidStart: this.deps.cfg.uidStart, uidRanges: this.deps.cfg.uidRanges, ips: () => this.net.hosts() },
    );
    if (got === 'exists') throw AppError.of('server_exists', `server ${spec.id} already exists`);
    if (got === 'no_ip') throw AppError.of('no_address', 'every address of the server subnet is in use');
    if (got === 'no_uid') throw AppError.of('no_uid_range', 'every uid range of this host is in use');
    return got;
  }

  async create(spec: ServerSpec): Promise<RuntimeServer> {
    // a reservation is taken once; one whose transaction was rolled back left no record
    const reserved = this.reserved.delete(spec.id) ? this.deps.store.get(spec.id) : undefined;
    const rec = reserved?.pending !== undefined && !this.servers.has(spec.id) ? reserved : this.allocate(spec);
    const applied: Applied = { slug: spec.slug, memoryBytes: spec.memoryBytes, diskBytes: spec.diskBytes };
    return this.serial(spec.id, async () => {
      this.view(rec, 'creating', applied);
      const p = diskPaths(this.serverDir(rec.id));
      try {
        await makeDisk(p, spec.diskBytes);
        await mountRootfs(p, this.deps.helper, this.lower(rec), rec.uidBase);
        personalise(diskPaths(this.serverDir(rec.id)).rootfs, rec.uidBase, spec.slug);
        this.writeBundle(rec, applied);
        await this.net.addServer(rec.ip);
        await this.boot(rec);
      } catch (e) {
        this.deps.log.error('create failed; rolling back', { server: rec.id, err: e });
        await this.teardown(rec).catch((err) => this.deps.log.error('rollback failed', { server: rec.id, err }));
        throw e;
      }
      if (spec.pendingUntil === undefined) this.deps.store.commit(rec.id);
      this.deps.log.info('server created', { server: rec.id, ip: rec.ip, uidBase: rec.uidBase });
      return this.view(rec, 'running', applied);
    });
  }

  start(id: string): Promise<void> {
    return this.serial(id, async () => {
      const rec = this.record(id);
      const desire = () => void this.deps.store.setDesired(id, 'running');
      if (this.servers.get(id)?.state === 'running' && (await this.runc.state(id))?.status === 'running') return desire();
      this.view(rec, 'waking');
      try {
        await this.boot(rec, desire);
      } catch (e) {
        this.setState(id, 'failed');
        throw e;
      }
      this.setState(id, 'running');
    });
  }

  stop(id: string, opts: { park?: boolean } = {}): Promise<void> {
    return this.serial(id, async () => {
      const rec = this.deps.store.setDesired(id, 'stopped') ?? this.record(id);
      await this.halt(rec, this.deps.cfg.stopGrace);
      const p = diskPaths(this.serverDir(id));
      if (await applyDeferredGrow(p, this.deps.helper, this.lower(rec), rec.uidBase)) this.deps.log.info('disk grown offline while asleep', { server: id });
      if (opts.park !== false) await this.park(rec);
      this.view(rec, 'sleeping'); // once it is parked: a sleep is done when its state says so
    });
  }

  /** Doze (freezer.ts): the server's processes frozen in place, memory kept; thaw() undoes it. */
  freeze(id: string): Promise<{ memoryBytes: number; anonBytes: number }> {
    return this.serial(id, async () => (this.running(id), await freeze(cgroupPath(id)), memoryStats(cgroupPath(id))));
  }

  thaw(id: string): Promise<void> {
    return this.serial(id, async () => thaw(cgroupPath(id)));
  }

  /** SIGTERM, up to `graceMs`, SIGKILL to everything, runc delete. The namespaces and veth stay
   *  (the next start joins them; teardown releases them). */
  async halt(rec: RuntimeRecord, graceMs: number): Promise<void> {
    this.parking.forget(rec.id);
    thaw(cgroupPath(rec.id)); // a dozing server gets its SIGTERM and grace like any other
    const st = await this.runc.state(rec.id);
    if (st && st.status !== 'stopped' && st.pid > 0) {
      if (graceMs > 0 && st.status === 'running') {
        await this.runc.kill(rec.id, 'TERM');
        const deadline = Date.now() + graceMs;
        while (Date.now() < deadline && alive(st.pid)) await sleep(10);
      }
      if (alive(st.pid)) await this.runc.kill(rec.id, 'KILL', true);
      const deadline = Date.now() + 5000;
      while (Date.now() < deadline && alive(st.pid)) await sleep(10);
    }
    if (st) await this.runc.delete(rec.id, true);
    removeCgroup(cgroupPath(rec.id));
  }

  /** Everything a server has, released; the store record last. */
  async teardown(rec: RuntimeRecord): Promise<void> {
    await this.halt(rec, 0);
    await this.net.releaseNamespaces(rec.ip, nsPaths(this.serverDir(rec.id)));
    await this.net.removeServer(rec.ip);
    await destroyDisk(diskPaths(this.serverDir(rec.id)));
    this.deps.store.remove(rec.id);
    this.servers.delete(rec.id);
    this.reserved.delete(rec.id);
  }

  delete(id: string): Promise<void> {
    return this.serial(id, async () => {
      // doomed first: a crash part-way through is finished by reconcile, never booted again
      const rec = this.deps.store.doom(id, Date.now()) ?? this.record(id);
      await this.teardown(rec);
      this.deps.log.info('server deleted', { server: id });
    });
  }

  resize(id: string, limits: { memoryBytes: number; diskBytes: number }): Promise<void> {
    if (!(limits.memoryBytes >= 32 * MiB)) throw AppError.of('invalid_memory', 'memoryBytes must be at least 32 MiB');
    if (!(limits.diskBytes >= 64 * MiB)) throw AppError.of('invalid_disk', 'diskBytes must be at least 64 MiB');
    return this.serial(id, async () => {
      const rec = this.record(id);
      const old = this.applied(id);
      const p = diskPaths(this.serverDir(id));
      const diskBytes = Math.max(limits.diskBytes, statSync(p.img).size); // disks never shrink
      if (diskBytes > statSync(p.img).size) {
        const how = await growDisk(p, diskBytes);
        if (how === 'deferred') this.deps.log.warn('online disk growth refused (no CAP_SYS_RESOURCE); grows at the next sleep', { server: id });
      }
      const now: Applied = { slug: old.slug, memoryBytes: limits.memoryBytes, diskBytes };
      this.writeBundle(rec, now);
      const parked = this.parking.has(id);
      if (parked)
        await this.halt(rec, 0); // parked with the old limit: parked again below with the new one
      else if ((await this.runc.state(id))?.status === 'running') await this.runc.updateMemory(id, limits.memoryBytes);
      this.view(rec, this.servers.get(id)?.state ?? 'running', now);
      if (parked) await this.park(rec);
      if (now.memoryBytes !== old.memoryBytes || now.diskBytes !== old.diskBytes)
        this.deps.log.info('server resized', { server: id, memoryBytes: now.memoryBytes, diskBytes });
    });
  }

  private running(id: string): void {
    const s = this.servers.get(id);
    if (!s) throw AppError.of('server_not_found', `no server ${id} on this host`);
    if (s.state !== 'running') throw AppError.of('server_not_running', `server ${id} is ${s.state}; wake it first`);
  }

  /** The wrapper (exit reports, see execwrap.ts) when it was built. */
  private wrapping(): Wrapping | undefined {
    const host = this.deps.execWrapper;
    return host ? { host, inside: `${INIT_MOUNT}/${basename(host)}` } : undefined;
  }

  exec(id: string, opts: ExecOptions): PipeProcess {
    this.running(id);
    if (!opts.argv.length) throw AppError.of('invalid_argv', 'exec needs a command');
    const w = this.wrapping();
    const argv = w ? [w.inside, 'run', ...opts.argv] : opts.argv;
    return pipeExec(this.runc.execArgs(id, { tty: false, argv, env: opts.env, cwd: opts.cwd, preserveFds: w ? 1 : 0 }), !!w);
  }

  execPty(id: string, opts: PtyOptions): PtyProcess {
    this.running(id);
    if (!opts.argv.length) throw AppError.of('invalid_argv', 'exec needs a command');
    const env = { TERM: opts.term, ...opts.env };
    const w = this.wrapping();
    const argv = w ? [w.inside, 'run', ...opts.argv] : opts.argv;
    return ptyExec(this.runc.execArgs(id, { tty: true, argv, env, cwd: opts.cwd, preserveFds: w ? 1 : 0 }), opts, w);
  }

  async stats(id: string): Promise<ServerStats> {
    const rec = this.record(id);
    const running = this.servers.get(id)?.state === 'running';
    const { memoryBytes, oomKills } = running ? memoryStats(cgroupPath(id)) : { memoryBytes: 0, oomKills: 0 };
    return { memoryBytes, oomKills, diskUsedBytes: this.diskUsedBytes(id), egressBytes: await this.net.egressBytes(rec.ip) };
  }

  diskUsedBytes(id: string): number {
    return diskUsed(diskPaths(this.serverDir(id)));
  }

  get(id: string): RuntimeServer | undefined {
    return this.servers.get(id);
  }

  list(): RuntimeServer[] {
    return [...this.servers.values()];
  }

  /** Lets the container's root user traverse to its rootfs (runc needs o+x on every parent). */
  static openPath(dataDir: string): void {
    for (const d of [dataDir, join(dataDir, 'servers')]) {
      mkdirSync(d, { recursive: true });
      chmodSync(d, statSync(d).mode | 0o111);
    }
  }
}
