// The making of a new server: its record reserved pending before anything exists on the host
// (allocate.ts), then its disk — an empty one over the current image, or (a fork, a move, a
// recovery) a checkpoint's disk adopted, its files shifted to the server's uid range and, for a
// fork, its identity files reset —, its name files, bundle and network, booted or (made asleep)
// parked; a failure rolls everything back (teardown, which a delete and reconcile use too). The
// runtime (runtime.ts) owns the lifecycle around it and answers reserve(), create() and
// teardown() through it.

import { basename, dirname } from 'node:path';
import type { RuntimeRecord } from '../store/index.js';
import { allocateRecord } from './allocate.js';
import { personalise } from './bundle.js';
import type { RuntimeDeps } from './deps.js';
import { destroyDisk, diskPaths, makeDisk, mountRootfs } from './disk.js';
import { adoptImage, shiftOwners } from './diskcopy.js';
import { resetIdentity } from './forkidentity.js';
import { nsPaths, type Network } from './network.js';
import { writeNet, type Applied } from './serverfiles.js';
import type { NetBounds, RuntimeServer, ServerSpec, ServerState } from './types.js';

/** What the create path needs of the runtime. */
export interface CreateHost {
  readonly deps: Pick<RuntimeDeps, 'store' | 'cfg' | 'log' | 'helper' | 'image'>;
  readonly net: Network;
  /** The servers in the runtime's view. */
  readonly servers: Map<string, RuntimeServer>;
  serverDir(id: string): string;
  serial<T>(id: string, fn: () => Promise<T>): Promise<T>;
  view(rec: RuntimeRecord, state: ServerState, applied?: Applied): RuntimeServer;
  /** The rootfs of the image the server was created from. */
  lower(rec: RuntimeRecord): string;
  writeBundle(rec: RuntimeRecord, applied?: Pick<Applied, 'slug' | 'memoryBytes'>): void;
  defaultNet(): NetBounds;
  boot(rec: RuntimeRecord): Promise<void>;
  park(rec: RuntimeRecord): Promise<void>;
  /** SIGTERM, up to `graceMs`, SIGKILL to everything, runc delete (halt.ts). */
  halt(rec: RuntimeRecord, graceMs: number): Promise<void>;
}

export class Creator {
  /** Ids reserved (reserve) whose create has not started yet. */
  private readonly reserved = new Set<string>();

  constructor(private readonly rt: CreateHost) {}

  /** The runtime record of a new server, written pending before anything exists on the host: a
   *  crash from then on leaves a record that reconcile tears down with all it holds. */
  reserve(spec: ServerSpec): void {
    this.allocate(spec);
    this.reserved.add(spec.id);
  }

  /** Everything a server has, released — its container, namespaces, veth, disk and view; the
   *  store record last: a create's rollback, a delete, reconcile's removal of a create cut short. */
  async teardown(rec: RuntimeRecord): Promise<void> {
    const { rt } = this;
    await rt.halt(rec, 0);
    await rt.net.releaseNamespaces(rec.ip, nsPaths(rt.serverDir(rec.id)));
    await rt.net.removeServer(rec.ip);
    await destroyDisk(diskPaths(rt.serverDir(rec.id)));
    rt.deps.store.remove(rec.id);
    rt.servers.delete(rec.id);
    this.reserved.delete(rec.id);
  }

  private allocate(spec: ServerSpec): RuntimeRecord {
    // the current image's tag, or (a fork) the one its checkpoint's disk goes over
    return allocateRecord(spec, this.rt.deps, spec.fromDisk?.image || basename(dirname(this.rt.deps.image)), () => this.rt.net.hosts());
  }

  async create(spec: ServerSpec): Promise<RuntimeServer> {
    const { rt } = this;
    const { store, log, helper } = rt.deps;
    // a reservation is taken once; one whose transaction was rolled back left no record
    const reserved = this.reserved.delete(spec.id) ? store.get(spec.id) : undefined;
    const rec = reserved?.pending !== undefined && !rt.servers.has(spec.id) ? reserved : this.allocate(spec);
    const applied: Applied = { slug: spec.slug, memoryBytes: spec.memoryBytes, diskBytes: spec.diskBytes, net: spec.net ?? rt.defaultNet() };
    return rt.serial(spec.id, async () => {
      rt.view(rec, 'creating', applied);
      const p = diskPaths(rt.serverDir(rec.id));
      try {
        if (spec.fromDisk) await adoptImage(p, spec.fromDisk, spec.diskBytes);
        else await makeDisk(p, spec.diskBytes);
        await mountRootfs(p, helper, rt.lower(rec), rec.uidBase);
        if (spec.fromDisk?.uidBase !== undefined) shiftOwners(p.upper, spec.fromDisk.uidBase, rec.uidBase); // a fork: its files to this range
        if (!personalise(p.rootfs, rec.uidBase, spec.slug)) log.warn('its /etc is not a directory: its name files left as they are', { server: rec.id });
        // a fork's own identity; a server moved or recovered here keeps its host keys and machine id
        if (spec.fromDisk?.fork) log.info('fork: identity files reset', { server: rec.id, ...resetIdentity(p.rootfs) });
        rt.writeBundle(rec, applied);
        writeNet(rt.serverDir(rec.id), applied.net);
        await rt.net.addServer(rec.ip, applied.net);
        if (spec.start === false) {
          store.setDesired(rec.id, 'stopped');
          await rt.park(rec);
        } else await rt.boot(rec);
      } catch (e) {
        log.error('create failed; rolling back', { server: rec.id, err: e });
        await this.teardown(rec).catch((err) => log.error('rollback failed', { server: rec.id, err }));
        throw e;
      }
      if (spec.pendingUntil === undefined) store.commit(rec.id);
      log.info('server created', { server: rec.id, ip: rec.ip, uidBase: rec.uidBase, ...(spec.start === false ? { asleep: true } : {}) });
      return rt.view(rec, spec.start === false ? 'sleeping' : 'running', applied);
    });
  }
}
