// A checkpoint's manifest: what the server was (its settings) and which chunk holds each piece of
// its disk image. It is the last blob a checkpoint writes — a checkpoint without one does not
// exist, whatever chunks it left (the collector takes them) — and it is sealed like a chunk
// (seal.ts), under its own key as additional data. The blob keys are made here and nowhere else.

import { randomBytes } from 'node:crypto';

export type CheckpointKind = 'manual' | 'auto';

/** What a server is besides its disk, kept with every checkpoint (restore and fork use it). */
export interface ServerSettings {
  tier: string;
  /** The base image's id (its tag); the disk holds only what the server wrote over it. */
  image: string;
  slug: string;
  /** Whether /root/run.sh existed when the checkpoint was taken. */
  runSh: boolean;
}

export interface Manifest {
  v: 1;
  id: string;
  serverId: string;
  /** When it was taken, by the clock of the host that took it (hosts' clocks differ: never
   *  compared across hosts alone, see `byLineage`). */
  createdAt: number;
  /** The placement epoch under which the host that took it ran the server (registry/names.ts:
   *  every placement and start bumps it), absent on a single box, where the host knew none, and in
   *  manifests written before it was recorded. */
  epoch?: number;
  kind: CheckpointKind;
  comment?: string;
  settings: ServerSettings;
  /** The host uid of the server's root when it was taken (its files' owners on the disk); a
   *  restore or fork onto another uid range moves them. */
  uidBase?: number;
  /** The disk image's size (its ceiling); chunks cover its non-zero parts only. */
  imageBytes: number;
  chunkSize: number;
  /** [chunk index, chunk id] for each chunk holding a non-zero byte; the rest is zeroes. */
  chunks: [number, string][];
  /** Bytes of the image held in chunks (chunks × chunk size, the last one cut at imageBytes). */
  dataBytes: number;
  /** Sealed bytes this checkpoint added to the store (what was not there already). */
  newBytes: number;
  /** Sealed bytes of every chunk it references (what it would cost alone). */
  storedBytes: number;
}

const ID = /^ckp_[0-9a-z]{10}[0-9a-f]{12}$/;
const SERVER = /^[A-Za-z0-9_-]{1,64}$/;

/** A new checkpoint id: `ckp_` + the time in base 36 (sorts by time) + 48 random bits. */
export function newCheckpointId(now: number): string {
  return `ckp_${now.toString(36).padStart(10, '0').slice(-10)}${randomBytes(6).toString('hex')}`;
}

export const isCheckpointId = (s: string): boolean => ID.test(s);
export const isServerId = (s: string): boolean => SERVER.test(s);

export const keys = {
  chunk: (id: string) => `chunks/${id.slice(0, 2)}/${id}`,
  chunkPrefix: 'chunks/',
  manifest: (serverId: string, id: string) => `manifests/${serverId}/${id}`,
  manifests: (serverId?: string) => (serverId ? `manifests/${serverId}/` : 'manifests/'),
  pending: (id: string) => `pending/${id}`,
  pendingPrefix: 'pending/',
  /** One collector's lock (its owner and run): each collector removes only its own, so a
   *  checkpoint waits while any collector of any host sweeps. */
  gcLock: (holder: string) => `gc/locks/${holder}`,
  /** Every lock (and the single `gc/lock` an earlier version wrote). */
  gcLockPrefix: 'gc/lock',
};

/** The chunk id a chunk key names, or undefined for a key that is no chunk's. */
export function chunkIdOf(key: string): string | undefined {
  const m = /^chunks\/[0-9a-f]{2}\/([0-9a-f]{64})$/.exec(key);
  return m?.[1];
}

/** Orders a server's checkpoints along its lineage, newest first: the highest placement epoch
 *  first (a host that took the placement after another holds a higher one, whatever the two
 *  clocks say), then the newest within an epoch (one host's clock); manifests without an epoch
 *  (written before it was recorded, or where none was known) after every one with it, newest
 *  first among themselves. Ties by id, so the order is total. */
export function byLineage(a: Pick<Manifest, 'id' | 'createdAt' | 'epoch'>, b: Pick<Manifest, 'id' | 'createdAt' | 'epoch'>): number {
  return (b.epoch ?? -1) - (a.epoch ?? -1) || b.createdAt - a.createdAt || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
}

/** A manifest read back: every field checked, so a manifest from a newer or broken writer is
 *  refused rather than half-used. */
export function parseManifest(text: string): Manifest {
  const m = JSON.parse(text) as Manifest;
  const ok =
    m?.v === 1 &&
    isCheckpointId(m.id) &&
    isServerId(m.serverId) &&
    Number.isSafeInteger(m.createdAt) &&
    (m.epoch === undefined || (Number.isSafeInteger(m.epoch) && m.epoch >= 0)) &&
    (m.kind === 'manual' || m.kind === 'auto') &&
    typeof m.settings?.tier === 'string' &&
    typeof m.settings.image === 'string' &&
    typeof m.settings.slug === 'string' &&
    typeof m.settings.runSh === 'boolean' &&
    (m.uidBase === undefined || Number.isSafeInteger(m.uidBase)) &&
    Number.isSafeInteger(m.imageBytes) &&
    m.imageBytes >= 0 &&
    Number.isSafeInteger(m.chunkSize) &&
    m.chunkSize > 0 &&
    Array.isArray(m.chunks) &&
    m.chunks.every((c) => Array.isArray(c) && Number.isSafeInteger(c[0]) && c[0] >= 0 && c[0] * m.chunkSize < m.imageBytes && /^[0-9a-f]{64}$/.test(c[1]));
  if (!ok) throw new Error('malformed checkpoint manifest');
  return m;
}
