// The start path of a server: boot (a parked server only gets its runc start, park.ts; else
// mounts and namespaces when missing → runc create → runc start), the launch of a runc step with
// the start's store write beside it (deleting the container when either fails), and the timing
// of each step for the runtime's `trace` hook (bench/wake). The runtime (runtime.ts) owns the
// lifecycle around it and the serialisation of operations.

import { join } from 'node:path';
import type { RuntimeRecord } from '../store/index.js';
import { diskPaths, mountTable, mountRootfs } from './disk.js';
import { nsPaths, type Network } from './network.js';
import type { Runc } from './runc.js';

/** What the start path needs of the runtime. */
export interface StartHost {
  /** Compiled idmapped-mount helper. */
  readonly helper: string;
  readonly runc: Runc;
  readonly net: Network;
  serverDir(id: string): string;
  /** The rootfs of the image the server was created from. */
  lower(rec: RuntimeRecord): string;
  /** The start of a parked server (park.ts wake). */
  wakeParked(rec: RuntimeRecord, meanwhile: () => void): Promise<{ started: boolean; ran: boolean }>;
  /** The runtime's trace hook as it is now (set and cleared at any time). */
  trace(): ((step: string, ms: number) => void) | undefined;
}

export class Starter {
  constructor(private readonly host: StartHost) {}

  /** Times one step of a start when `trace` is set. */
  async step<T>(name: string, fn: () => Promise<T>): Promise<T> {
    const trace = this.host.trace();
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
    const { runc } = this.host;
    const parked = await this.host.wakeParked(rec, meanwhile);
    if (parked.started) return;
    if (parked.ran) meanwhile = () => {};
    if (runc.exists(rec.id)) {
      const st = await runc.state(rec.id);
      if (st?.status === 'running') return meanwhile();
      if (st) await runc.delete(rec.id, true);
    }
    const pid = await this.launch(rec, this.createContainer(rec), meanwhile);
    try {
      await this.step('runc start', () => runc.start(rec.id, pid));
    } catch (e) {
      await runc.delete(rec.id, true).catch(() => {});
      throw e;
    }
  }

  /** Awaits `op` (a runc create or start under way) with `meanwhile` run beside it; when either
   *  fails the container is deleted. */
  async launch<T>(rec: RuntimeRecord, op: Promise<T>, meanwhile: () => void): Promise<T> {
    try {
      const t0 = performance.now();
      meanwhile(); // the runc step is under way by now
      this.host.trace()?.('store (beside runc)', performance.now() - t0);
    } catch (e) {
      await op.then(() => this.host.runc.delete(rec.id, true)).catch(() => {});
      throw e;
    }
    try {
      return await op;
    } catch (e) {
      await this.host.runc.delete(rec.id, true).catch(() => {});
      throw e;
    }
  }

  /** Mounts and namespaces checked (made when missing), then runc create; init's pid. */
  async createContainer(rec: RuntimeRecord): Promise<number> {
    const dir = this.host.serverDir(rec.id);
    const table = mountTable(); // read once: what mountRootfs mounts is none of the namespaces' paths
    await this.step('mounts (kept)', () => mountRootfs(diskPaths(dir), this.host.helper, this.host.lower(rec), rec.uidBase, table));
    await this.step('namespaces + veth (kept)', () => this.host.net.ensureNamespaces(rec.ip, rec.uidBase, nsPaths(dir), table));
    return this.step('runc create', () => this.host.runc.create(rec.id, join(dir, 'bundle')));
  }
}
