// What this host can still take, and which host takes a create when this one cannot (issue 29
// item 5). Room is counted from the servers' tier ceilings (spec part 8; pending creates
// included), not from what they use at this instant, against the budgets of hosting.capacity:
//   memory room = budget (default 4 × the machine's memory) − Σ memory ceilings
//   disk room   = min(budget (default the data dir's filesystem size) − Σ disk ceilings,
//                     free space of the data dir − 2 GiB)
//   servers     = count, against hosting.capacity.servers (0: no count limit)
// A tier fits when both rooms hold its ceilings, a server more is allowed, and the machine has
// min(ceiling, 512 MiB) of memory free now. Every host reports these facts in its lease (the
// `capacity` JSON, renewed each heartbeat); a host without room for a create picks among the
// other up hosts the one with the most memory room (then disk room) whose facts fit the tier.

import { statfsSync } from 'node:fs';
import { freemem, totalmem } from 'node:os';
import type { Config } from '../config/index.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
/** Free disk a host keeps for itself (the data dir's LMDB, logs, images). */
const DISK_RESERVE = 2 * GiB;
/** Free memory a new server needs at least (its ceiling when smaller). */
const MEMORY_FLOOR = 512 * MiB;

/** What a host can still take, as its lease reports it (bytes and counts). */
export type Capacity = {
  servers: number;
  /** 0: no count limit. */
  serversMax: number;
  memoryFreeBytes: number;
  diskFreeBytes: number;
  memoryRoomBytes: number;
  diskRoomBytes: number;
};

export interface Need {
  memoryBytes: number;
  diskBytes: number;
}

/** A host as the registry lists it: its lease and the capacity it reported. */
export interface HostRoom {
  name: string;
  up: boolean;
  capacity: Partial<Record<keyof Capacity, number>>;
}

/** This host's capacity now, from its servers' ceilings (every record, pending ones included). */
export function measureCapacity(cfg: Pick<Config, 'dataDir' | 'hosting'>, servers: readonly Need[]): Capacity {
  let total = 0;
  let size = 0;
  try {
    const s = statfsSync(cfg.dataDir);
    total = s.bavail * s.bsize;
    size = s.blocks * s.bsize;
  } catch {
    // a data dir that cannot be read has no room
  }
  const c = cfg.hosting.capacity;
  let memory = 0;
  let disk = 0;
  for (const s of servers) {
    memory += s.memoryBytes;
    disk += s.diskBytes;
  }
  return {
    servers: servers.length,
    serversMax: c.servers,
    memoryFreeBytes: freemem(),
    diskFreeBytes: total,
    memoryRoomBytes: Math.max(0, (c.memory ?? 4 * totalmem()) - memory),
    diskRoomBytes: Math.max(0, Math.min((c.disk ?? size) - disk, total - DISK_RESERVE)),
  };
}

/** Why a server with these ceilings does not fit (a phrase after "this host"), or undefined when it does. */
export function shortOf(c: HostRoom['capacity'], need: Need): string | undefined {
  const { servers, serversMax, memoryFreeBytes, memoryRoomBytes, diskRoomBytes } = c;
  if (memoryRoomBytes === undefined || diskRoomBytes === undefined || memoryFreeBytes === undefined) return 'reports no capacity';
  if (serversMax && (servers ?? 0) >= serversMax) return `holds its most servers (${serversMax})`;
  if (memoryRoomBytes < need.memoryBytes) return 'has no memory left for the ceiling of a new server';
  if (diskRoomBytes < need.diskBytes) return 'has no disk space left for the ceiling of a new server';
  if (memoryFreeBytes < Math.min(need.memoryBytes, MEMORY_FLOOR)) return 'is out of memory right now';
  return undefined;
}

/** The up host other than `self` with the most room that fits `need`; undefined when none does. */
export function chooseHost(hosts: readonly HostRoom[], self: string, need: Need): string | undefined {
  const fit = hosts.filter((h) => h.up && h.name !== self && !shortOf(h.capacity, need));
  fit.sort(
    (a, b) =>
      b.capacity.memoryRoomBytes! - a.capacity.memoryRoomBytes! || b.capacity.diskRoomBytes! - a.capacity.diskRoomBytes! || a.name.localeCompare(b.name),
  );
  return fit[0]?.name;
}
