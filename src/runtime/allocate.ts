// The admission of a new server: its spec checked (id, slug, memory and disk floors — the limit
// floors also at resize) and its runtime record allocated in the store (address, uid range,
// image tag), written pending with a deadline until the create is committed.

import type { RuntimeConfig } from '../config/index.js';
import { AppError } from '../errors.js';
import type { RuntimeRecord, RuntimeStore } from '../store/index.js';
import type { ServerSpec } from './types.js';

const ID = /^srv_[A-Za-z0-9_-]{1,60}$/;
/** How long a create may stay uncommitted when the caller does not commit it itself. */
const CREATE_DEADLINE_MS = 10 * 60_000;
const SLUG = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const MiB = 1024 * 1024;

/** The memory and disk floors of a server. */
export function checkLimits(limits: { memoryBytes: number; diskBytes: number }): void {
  if (!(limits.memoryBytes >= 32 * MiB)) throw AppError.of('invalid_memory', 'memoryBytes must be at least 32 MiB');
  if (!(limits.diskBytes >= 64 * MiB)) throw AppError.of('invalid_disk', 'diskBytes must be at least 64 MiB');
}

/** The spec checked, then the pending record allocated; `image` is the current image's tag. */
export function allocateRecord(spec: ServerSpec, deps: { store: RuntimeStore; cfg: RuntimeConfig }, image: string, ips: () => Iterable<string>): RuntimeRecord {
  if (!ID.test(spec.id)) throw AppError.of('invalid_server_id', 'server id must look like srv_<letters, digits, _ or ->');
  if (!SLUG.test(spec.slug)) throw AppError.of('invalid_slug', 'slug must be a DNS label: lowercase letters, digits and inner hyphens, at most 63');
  checkLimits(spec);
  const got = deps.store.allocate(
    { id: spec.id, desired: 'running', createdAt: Date.now(), pending: spec.pendingUntil ?? Date.now() + CREATE_DEADLINE_MS, image },
    { uidStart: deps.cfg.uidStart, uidRanges: deps.cfg.uidRanges, ips },
  );
  if (got === 'exists') throw AppError.of('server_exists', `server ${spec.id} already exists`);
  if (got === 'no_ip') throw AppError.of('no_address', 'every address of the server subnet is in use');
  if (got === 'no_uid') throw AppError.of('no_uid_range', 'every uid range of this host is in use');
  return got;
}
