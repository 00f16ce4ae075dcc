// The container runtime: servers as runc containers with their own disk, network identity and
// uid range. Owns the lifecycle (create, start/wake, stop/sleep, delete, resize), exec, stats and
// the in-memory view of every server; reconcile.ts brings runc and the store together at boot.
// Operations on one server are serialised; different servers proceed in parallel.
// Its store record holds what it owns (address, uid range, desired state). Slug and limits are
// given in the spec (create) and at resize and kept where they act: the bundle's config.json
// (hostname, memory limit) and the disk image's size — read back when a runtime starts anew.
// Split out: what it is made from deps.ts, the create path (from the image or a checkpoint's
// disk: a fork, a move) and teardown create.ts, the admission allocate.ts, parking of sleeping
// servers (a `created` container kept for a fast wake) park.ts, the start path start.ts, the halt
// halt.ts, resize resize.ts, what a server was given (bundle, disk size, image) serverfiles.ts,
// exec execrun.ts, doze freezer.ts, the disk copy and swap of checkpoints diskswap.ts. Every start
// of an existing server asks the start guard first (deps.mayStart: cluster mode's wake fence).

import { newestChange } from './changes.js';
import { join } from 'node:path';
import { AppError } from '../errors.js';
import type { RuntimeRecord } from '../store/index.js';
import type { RuntimeDeps } from './deps.js';
import { cgroupPath } from './spec.js';
import { unmountDevices } from './devices.js';
import { applyDeferredGrow, diskPaths, diskUsed } from './disk.js';
import { memoryStats } from './cgroup.js';
import { isFrozen, ServerFreezer, thaw } from './freezer.js';
import { Network, nsPaths } from './network.js';
import { NetWatch } from './netwatch.js';
import { Runc } from './runc.js';
import { Parking } from './park.js';
import { Starter } from './start.js';
import { haltContainer } from './halt.js';
import { resizeServer } from './resize.js';
import { lowerOf, readApplied, viewOf, writeBundle, type Applied } from './serverfiles.js';
import { execIn, execPtyIn } from './execrun.js';
import { DiskSwap } from './diskswap.js';
import { Creator } from './create.js';
import type {
  DiskCapture,
  ExecOptions,
  NetBounds,
  PipeProcess,
  PtyOptions,
  PtyProcess,
  Runtime,
  RuntimeServer,
  ServerSpec,
  ServerState,
  ServerStats,
} from './types.js';

export class ContainerRuntime implements Runtime {
  readonly net: Network;
  readonly runc: Runc;
  readonly servers = new Map<string, RuntimeServer>();
  private readonly queues = new Map<string, Promise<unknown>>();
  /** Its servers' freezes and thaws (freezer.ts: the pin, thaws told by id). */
  private readonly freezer: ServerFreezer;
  /** The create path (create.ts): reservations, disks from the image or a checkpoint. */
  private readonly creator: Creator;
  /** Servers parked asleep (park.ts). */
  private readonly parking: Parking;
  /** The start path (start.ts). */
  private readonly starter: Starter;
  /** Checkpoints' copy and restore's swap of a disk (diskswap.ts). */
  private readonly diskSwap: DiskSwap;
  /** Repairs a server whose veth or egress element vanished (netwatch.ts); started by watch(). */
  readonly netWatch: NetWatch;
  /** Called with each step of a start and its duration (bench/wake); unset, steps are not timed. */
  trace?: (step: string, ms: number) => void;

  constructor(readonly deps: RuntimeDeps) {
    this.freezer = new ServerFreezer(`/${deps.cfg.nftTable}`, (msg) => deps.log.warn(msg)); // spec.ts cgroupPath's parent
    this.net = new Network(deps.cfg);
    this.runc = new Runc(join(deps.dataDir, 'runc'));
    this.starter = new Starter({
      helper: deps.helper,
      runc: this.runc,
      net: this.net,
      serverDir: (id) => this.serverDir(id),
      lower: (rec) => this.lower(rec),
      wakeParked: (rec, meanwhile) => this.parking.wake(rec, meanwhile),
      trace: () => this.trace,
    });
    this.netWatch = new NetWatch({
      net: this.net,
      log: deps.log,
      servers: () =>
        this.list()
          .filter((s) => s.state === 'running' || s.state === 'sleeping')
          .map((s) => ({ id: s.id, ip: s.ip, ns: nsPaths(this.serverDir(s.id)), running: s.state === 'running', net: this.applied(s.id).net })),
      serial: (id, fn) => this.serial(id, fn),
      restart: async (id) => (await this.stop(id, { park: false }), await this.start(id)),
    });
    this.parking = new Parking({
      deps,
      runc: this.runc,
      net: this.net,
      serverDir: (id) => this.serverDir(id),
      serial: <T>(id: string, fn: () => Promise<T>) => this.serial(id, fn),
      state: (id) => this.servers.get(id)?.state,
      createContainer: (rec) => this.starter.createContainer(rec),
      launch: <T>(rec: RuntimeRecord, op: Promise<T>, meanwhile: () => void) => this.starter.launch(rec, op, meanwhile),
      step: <T>(name: string, fn: () => Promise<T>) => this.starter.step(name, fn),
      halt: (id) => this.halt(this.record(id), 0),
    });
    this.creator = new Creator(this);
    this.diskSwap = new DiskSwap({
      deps,
      serverDir: (id) => this.serverDir(id),
      serial: <T>(id: string, fn: () => Promise<T>) => this.serial(id, fn),
      record: (id) => this.record(id),
      lower: (rec) => this.lower(rec),
      state: (id) => this.servers.get(id)?.state,
      halt: (rec) => this.halt(rec, this.deps.cfg.stopGrace),
      start: (id) => this.start(id),
      wantRunning: (id) => this.deps.store.setDesired(id, 'running'),
      swapped: (rec, diskBytes) => void this.view(rec, 'sleeping', { ...this.applied(rec.id), diskBytes }),
    });
  }

  /** Server `id`'s cgroup path on this daemon (spec.ts cgroupPath). */
  cgroup(id: string): string {
    return cgroupPath(this.deps.cfg, id);
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
    const s = viewOf(rec, state, applied, this.serverDir(rec.id));
    this.servers.set(rec.id, s);
    return s;
  }

  /** Slug and limits as applied: from the view, or (a new runtime instance) from the server's
   *  bundle (hostname, memory limit) and disk image (size). */
  applied(id: string): Applied {
    const known = this.servers.get(id);
    if (known) return { slug: known.slug, memoryBytes: known.memoryBytes, diskBytes: known.diskBytes, net: known.net ?? this.defaultNet() };
    return readApplied(this.serverDir(id), id, this.defaultNet());
  }

  /** The bounds of a server given none: the anonymous tier's (runtime.egress). */
  defaultNet(): NetBounds {
    return { ...this.deps.cfg.egress.anonymous };
  }

  private setState(id: string, state: ServerState): void {
    const s = this.servers.get(id);
    if (s) s.state = state;
  }

  /** The server's record (server_not_found when it has none). */
  record(id: string): RuntimeRecord {
    const rec = this.deps.store.get(id);
    if (!rec) throw AppError.of('server_not_found', `no server ${id} on this host`);
    return rec;
  }

  /** Writes the OCI bundle of a server (by default with the slug and memory limit it has now).
   *  The file is synced before it replaces the old one: it is where the applied limit is kept. */
  writeBundle(rec: RuntimeRecord, applied: Pick<Applied, 'slug' | 'memoryBytes'> = this.applied(rec.id)): void {
    writeBundle(this.deps, this.serverDir(rec.id), rec, applied);
  }

  /** The rootfs of the image the server was created from (its overlay's lower layer). */
  lower(rec: RuntimeRecord): string {
    return lowerOf(this.deps.image, rec);
  }

  /** Boots a server (start.ts): a parked one only gets its runc start, else mounts and namespaces
   *  when missing → runc create → runc start; `meanwhile` runs beside the runc step. */
  boot(rec: RuntimeRecord, meanwhile?: () => void): Promise<void> {
    return this.starter.boot(rec, meanwhile);
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

  /** The runtime record of a new server, written pending before anything exists on the host (create.ts). */
  reserve(spec: ServerSpec): void {
    this.creator.reserve(spec);
  }

  /** A new server made from the image or from a checkpoint's disk (a fork, a move; create.ts). */
  create(spec: ServerSpec): Promise<RuntimeServer> {
    return this.creator.create(spec);
  }

  /** The one start of an existing server (wake, restart, resume, a network repair): the start
   *  guard is asked first; its refusal leaves the server as it is. */
  async start(id: string): Promise<void> {
    const guard = this.deps.mayStart;
    for (;;) {
      // what the start waits for (a move of the server) is waited for outside the queue, and
      // again if it began while this start waited for its turn
      await guard?.waitFor?.(id);
      const started = await this.serial(id, async () => {
        const rec = this.record(id);
        const desire = () => void this.deps.store.setDesired(id, 'running');
        if (this.servers.get(id)?.state === 'running' && (await this.runc.state(id))?.status === 'running') return (desire(), true);
        if (guard?.waitFor?.(id)) return false;
        await guard?.(id);
        this.view(rec, 'waking');
        try {
          await this.boot(rec, desire);
        } catch (e) {
          this.setState(id, 'failed');
          throw e;
        }
        this.setState(id, 'running');
        return true;
      });
      if (started) return;
    }
  }

  stop(id: string, opts: { park?: boolean; graceMs?: number } = {}): Promise<void> {
    return this.serial(id, async () => {
      const rec = this.deps.store.setDesired(id, 'stopped') ?? this.record(id);
      await this.halt(rec, opts.graceMs ?? this.deps.cfg.stopGrace);
      const p = diskPaths(this.serverDir(id));
      await this.diskSwap.flush(id); // stopped with its writes on its image (or, the flush failed, counted as changed): whether it changed since its checkpoint is known now
      if (await applyDeferredGrow(p, this.deps.helper, this.lower(rec), rec.uidBase)) this.deps.log.info('disk grown offline while asleep', { server: id });
      if (opts.park !== false) await this.park(rec);
      this.view(rec, 'sleeping'); // once it is parked: a sleep is done when its state says so
    });
  }

  /** A consistent copy of the server's disk (diskswap.ts). */
  captureDisk<T>(id: string, use: (copy: DiskCapture) => Promise<T>): Promise<T> {
    return this.diskSwap.capture(id, use);
  }

  /** When the server's own files last changed (changes.ts: the newest ctime in its disk's upper layer). */
  filesChangedAt(id: string): number | undefined {
    if (!this.servers.has(id)) return undefined;
    return newestChange(diskPaths(this.serverDir(id)).upper);
  }

  diskWrittenAt(id: string): number | undefined {
    return this.diskSwap.writtenAt(id);
  }

  settledDiskAt(id: string): Promise<number | undefined> {
    return this.diskSwap.settledAt(id);
  }

  /** Restore: a staged image filled, then swapped in while the server is stopped (diskswap.ts). */
  replaceDisk(id: string, fill: (path: string) => Promise<void>, from: { uidBase?: number } = {}): Promise<void> {
    return this.diskSwap.replace(id, fill, from);
  }

  /** Doze (freezer.ts): the server's processes frozen in place, memory kept; thaw() undoes it. */
  freeze(id: string): Promise<{ memoryBytes: number; anonBytes: number }> {
    return this.serial(id, async () => (this.running(id), await this.freezer.freeze(this.cgroup(id)), memoryStats(this.cgroup(id))));
  }

  onThawed(fn: (id: string) => void): void {
    this.freezer.onThawed(fn);
  }

  thawsAtOnce(id: string): boolean {
    return !this.queues.has(id);
  }

  /** With nothing queued for the server, the cgroup write is made before this returns (a request
   *  waiting for the thaw goes on in the same turn of the event loop); else after what is queued. */
  thaw(id: string): Promise<void> {
    if (this.queues.has(id)) return this.serial(id, async () => thaw(this.cgroup(id)));
    try {
      thaw(this.cgroup(id));
      return Promise.resolve();
    } catch (e) {
      return Promise.reject(e as Error);
    }
  }

  /** A running server's frozen memory when its cgroup is frozen now (one or two file reads). */
  frozen(id: string): { memoryBytes: number; anonBytes: number } | undefined {
    return this.get(id)?.state === 'running' && isFrozen(this.cgroup(id)) ? memoryStats(this.cgroup(id)) : undefined;
  }

  /** SIGTERM, up to `graceMs`, SIGKILL to everything, runc delete. The namespaces and veth stay
   *  (the next start joins them; teardown releases them). */
  async halt(rec: RuntimeRecord, graceMs: number): Promise<void> {
    this.parking.forget(rec.id);
    await haltContainer(this.runc, rec.id, this.cgroup(rec.id), graceMs);
  }

  /** Everything a server has, released; the store record last (create.ts). */
  teardown(rec: RuntimeRecord): Promise<void> {
    return this.creator.teardown(rec);
  }

  delete(id: string): Promise<void> {
    return this.serial(id, async () => {
      // doomed first: a crash part-way through is finished by reconcile, never booted again
      const rec = this.deps.store.doom(id, Date.now()) ?? this.record(id);
      await this.teardown(rec);
      this.diskSwap.forget(id);
      this.deps.log.info('server deleted', { server: id });
    });
  }

  /** New limits (resize.ts): the disk grown, never shrunk; memory and network bounds applied live. */
  resize(id: string, limits: { memoryBytes: number; diskBytes: number; net?: NetBounds }): Promise<void> {
    return resizeServer(this, id, limits, (id) => this.parking.has(id));
  }

  private running(id: string): void {
    const s = this.servers.get(id);
    if (!s) throw AppError.of('server_not_found', `no server ${id} on this host`);
    if (s.state !== 'running') throw AppError.of('server_not_running', `server ${id} is ${s.state}; wake it first`);
    if (this.runc.initAlive(id)) return;
    // its container stopped behind the runtime's back (its init killed from outside): told so,
    // never runc's own "cannot exec in a stopped container", and started again by its next wake
    this.setState(id, 'failed');
    this.deps.log.warn('a running server’s container is not running: marked failed, started again at its next wake', { server: id });
    throw AppError.of('server_not_ready', `server ${s.slug}'s container stopped; it starts again at the next request, try again in a moment`, {
      retryAfter: 2,
    });
  }

  exec(id: string, opts: ExecOptions): PipeProcess {
    this.running(id);
    return execIn(this.runc, id, this.cgroup(id), opts, this.deps.execWrapper);
  }

  execPty(id: string, opts: PtyOptions): PtyProcess {
    this.running(id);
    return execPtyIn(this.runc, id, this.cgroup(id), opts, this.deps.execWrapper);
  }

  async stats(id: string): Promise<ServerStats> {
    const rec = this.record(id);
    const running = this.servers.get(id)?.state === 'running';
    const { memoryBytes, oomKills } = running ? memoryStats(this.cgroup(id)) : { memoryBytes: 0, oomKills: 0 };
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

  /** Stops watching the network, removes the freezer pin (one a killed daemon left too) and lets
   *  the host-name locks go (the daemon's stop; containers keep running, dozing ones frozen). */
  async close(): Promise<void> {
    this.netWatch.stop();
    this.freezer.close();
    await unmountDevices(this.deps.dataDir);
    await this.deps.hostLock?.release();
  }
}
