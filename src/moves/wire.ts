// What the source of a move sends the target over the channel, and what the target answers: the
// server as the source's store has it (id, account, slug, its key pair's public half, limits,
// never_sleep…), the checkpoint to restore, the placement epoch the source read (the target
// takes the placement from it, compare-and-set), whether it was running, the container ports it
// had exposed (re-allocated on the target), the records of its checkpoints (the list moves
// with it) and of its own domains, and the instant the source charged it up to (the target
// meters it from there). Both ends check it with zod: a peer of another version is refused, not half-read.

import { z } from 'zod';

/** The path of the target's side, answered only for a host that came over the channel. */
export const ADOPT_PATH = '/_rootbox/moves/adopt';

/** The target's prestage (staging.ts): a running server's checkpoint materialized there before the source stops it. */
export const PREPARE_PATH = '/_rootbox/moves/prepare';

/** What the source asks of the prestage: the server and its running checkpoint (C1). */
export const PrepareRequest = z
  .object({
    server: z.string().regex(/^srv_[0-9a-f]{1,32}$/),
    checkpoint: z.string().min(1).max(64),
    memoryBytes: z.number().int().positive(),
    diskBytes: z.number().int().positive(),
  })
  .strict();
export type PrepareRequest = z.infer<typeof PrepareRequest>;

/** The largest adopt request (a server record, its exposes and up to a few hundred checkpoint records). */
export const ADOPT_MAX_BYTES = 256 * 1024;

const ServerShape = z.object({
  id: z.string().regex(/^srv_[0-9a-f]{1,32}$/),
  accountId: z.string().min(1).max(80),
  slug: z.string().min(1).max(63),
  sshPublicKey: z.string().min(1).max(4096),
  keyFingerprint: z.string().min(1).max(128),
  memoryBytes: z.number().int().positive(),
  diskBytes: z.number().int().positive(),
  neverSleep: z.boolean(),
  suspended: z.boolean(),
  flag: z.string().max(200).nullable(),
  createdAt: z.number().int(),
});

const CheckpointShape = z.object({
  id: z.string().min(1).max(64),
  serverId: z.string().min(1).max(64),
  accountId: z.string().min(1).max(80),
  createdAt: z.number().int(),
  kind: z.enum(['manual', 'auto']),
  comment: z.string().max(1000).optional(),
  sizeBytes: z.number().int().nonnegative(),
  newBytes: z.number().int().nonnegative(),
  // no writtenAt: the disk's mtime by the source's clock (zod drops it if sent); the target sets
  // its own on the checkpoint it restored a sleeping server from (takeover.ts finishTakeover)
});

const DomainShape = z.object({
  domain: z.string().min(1).max(253),
  serverId: z.string().min(1).max(64),
  accountId: z.string().min(1).max(80),
  token: z.string().min(1).max(200),
  state: z.enum(['pending_dns', 'issuing', 'active', 'failed']),
  apex: z.boolean().optional(),
  reason: z.string().max(2000).optional(),
  createdAt: z.number().int(),
  checkedAt: z.number().optional(),
  activeAt: z.number().optional(),
});

export const AdoptRequest = z
  .object({
    server: ServerShape,
    /** The checkpoint the target restores (the source's last one, taken with the server stopped or asleep). */
    checkpoint: z.string().min(1).max(64),
    /** The checkpoint the target staged for this move (PREPARE_PATH): only what differs from it is fetched. Sent only to a target that answered the prepare. */
    base: z.string().min(1).max(64).optional(),
    /** The placement epoch the source read: the target takes the placement only from it. */
    epoch: z.number().int().positive(),
    /** Whether the server ran on the source (the target starts it; otherwise it sleeps there too). */
    running: z.boolean(),
    /** Container ports the server had exposed (public ports are the target's own). */
    exposed: z.array(z.number().int().min(1).max(65535)).max(64),
    checkpoints: z.array(CheckpointShape).max(500),
    /** Its own domains (the registry's claims stay as they are: the target routes them from now on). */
    domains: z.array(DomainShape).max(100),
    /** The instant (ms) the source charged the server up to: the target meters it from there (absent: a recovery, metered from its making). */
    meteredTo: z.number().int().nonnegative().optional(),
    /** The source's run (its registry identity): the target takes the placement only while that run holds the source's name (a move; none for a recovery). */
    run: z.string().min(1).max(100).optional(),
    /** A recovery's word to the owner (what was lost), appended to the server's /var/log/rootbox.log (recover.ts). */
    note: z.string().max(2000).optional(),
  })
  .strict();
export type AdoptRequest = z.infer<typeof AdoptRequest>;

export const AdoptAnswer = z.object({
  epoch: z.number().int().positive(),
  exposed_ports: z.array(z.object({ public: z.string(), container_port: z.number().int(), protocol: z.literal('tcp') })),
  state: z.string(),
});
export type AdoptAnswer = z.infer<typeof AdoptAnswer>;
