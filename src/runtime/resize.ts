// New limits for an existing server: its disk grown (never shrunk; online, or at its next sleep
// when the kernel refuses), its memory limit written to its bundle and applied to a running
// container live, a parked one parked again under the new limit, and changed network bounds
// applied at once (its next new connection meets them). The runtime (runtime.ts) owns the
// lifecycle around it and answers resize() through it, in the server's queue.

import { statSync } from 'node:fs';
import type { RuntimeRecord } from '../store/index.js';
import { checkLimits } from './allocate.js';
import type { RuntimeDeps } from './deps.js';
import { diskPaths, growDisk } from './disk.js';
import type { Network } from './network.js';
import type { Runc } from './runc.js';
import { writeNet, type Applied } from './serverfiles.js';
import type { NetBounds, RuntimeServer, ServerState } from './types.js';

/** What a resize needs of the runtime. */
export interface ResizeHost {
  readonly deps: Pick<RuntimeDeps, 'helper' | 'log'>;
  readonly net: Network;
  readonly runc: Runc;
  readonly servers: ReadonlyMap<string, RuntimeServer>;
  serverDir(id: string): string;
  serial<T>(id: string, fn: () => Promise<T>): Promise<T>;
  /** The server's record (server_not_found when it has none). */
  record(id: string): RuntimeRecord;
  applied(id: string): Applied;
  writeBundle(rec: RuntimeRecord, applied?: Pick<Applied, 'slug' | 'memoryBytes'>): void;
  view(rec: RuntimeRecord, state: ServerState, applied?: Applied): RuntimeServer;
  halt(rec: RuntimeRecord, graceMs: number): Promise<void>;
  park(rec: RuntimeRecord): Promise<void>;
}

/** Applies `limits` to server `id`; `parked` tells whether its container is parked now (park.ts). */
export function resizeServer(
  rt: ResizeHost,
  id: string,
  limits: { memoryBytes: number; diskBytes: number; net?: NetBounds },
  parked: (id: string) => boolean,
): Promise<void> {
  checkLimits(limits);
  const { log, helper } = rt.deps;
  return rt.serial(id, async () => {
    const rec = rt.record(id);
    const old = rt.applied(id);
    const p = diskPaths(rt.serverDir(id));
    const diskBytes = Math.max(limits.diskBytes, statSync(p.img).size); // disks never shrink
    if (diskBytes > statSync(p.img).size) {
      const how = await growDisk(p, helper, diskBytes);
      if (how === 'deferred') log.warn('online disk growth refused (no CAP_SYS_RESOURCE); grows at the next sleep', { server: id });
    }
    const now: Applied = { slug: old.slug, memoryBytes: limits.memoryBytes, diskBytes, net: limits.net ?? old.net };
    rt.writeBundle(rec, now);
    if (now.net.flows !== old.net.flows || now.net.newFlowsPerSecond !== old.net.newFlowsPerSecond) {
      writeNet(rt.serverDir(id), now.net);
      await rt.net.addServer(rec.ip, now.net); // live: its next new connection meets the new bounds
      log.info('server network bounds changed', { server: id, ...now.net });
    }
    const repark = parked(id) && now.memoryBytes !== old.memoryBytes;
    if (repark)
      await rt.halt(rec, 0); // parked with the old limit: parked again below with the new one
    else if ((await rt.runc.state(id))?.status === 'running') await rt.runc.updateMemory(id, limits.memoryBytes);
    rt.view(rec, rt.servers.get(id)?.state ?? 'running', now);
    if (repark) await rt.park(rec);
    if (now.memoryBytes !== old.memoryBytes || now.diskBytes !== old.diskBytes)
      log.info('server resized', { server: id, memoryBytes: now.memoryBytes, diskBytes });
  });
}
