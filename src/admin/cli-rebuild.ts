// `rootbox restore --from-backup FILE --store s3://bucket/prefix` (issue 37): a box that lost its
// disk comes back from its state backup (accounts, balances, servers with their slugs and key
// pairs; the host key, SSH host keys and certificates it carries: store/backupfiles.ts) and the
// checkpoint store (each server's disk as of its newest checkpoint that opens whole).
//
// Only into a fresh data dir (absent, empty, or only the lost+found of a new disk's filesystem):
// the box is rebuilt in a staging dir inside it and renamed into place at the end, so a refusal or
// a failure (the store unreachable or refusing, the disk full) leaves the data dir as it was —
// nothing half-written. The command holds the data dir's lock (a daemon's, runtime/locks.ts)
// throughout, and marks the data dir from before its staging dir until after its last rename is
// flushed (rebuildmark.ts): a kill -9 in between leaves the mark, a rerun clears what the killed
// one made and rebuilds, and the daemon refuses to start there meanwhile. A server without any checkpoint in the
// store (created since the last one, never asleep and younger than checkpoints.interval) comes back
// with its records and a fresh empty disk, said by name; so does one whose every checkpoint is
// damaged. The checkpoint records the API lists are set to what the store holds. The daemon started
// on the data dir afterwards mounts every disk and starts the servers that were running
// (runtime reconcile, as after a reboot); the sleeping ones stay asleep until visited.

import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, renameSync, rmdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { CheckpointEngine, blobKeys, byLineage, hostSecret, openS3BlobStore, publicError, type BlobStore, type Manifest } from '../checkpoints/index.js';
import type { Config } from '../config/index.js';
import { AppError, InternalError } from '../errors.js';
import { lockDataDir, runCommand as run, seedServer, type HostLock } from '../runtime/index.js';
import { openStore, restoreStore, type Store } from '../store/index.js';
import type { CliFlags, CliOut } from './cli-io.js';
import { markRebuild, REBUILD_MARK, unmarkRebuild } from './rebuildmark.js';
import { flushPath } from '../durable.js';

export interface RebuiltServer {
  id: string;
  slug: string;
  account: string;
  /** 'checkpoint': its disk is the checkpoint's; 'fresh_disk': no checkpoint could be used. */
  disk: 'checkpoint' | 'fresh_disk';
  checkpoint: string | null;
  checkpoint_at: string | null;
  desired: 'running' | 'stopped';
  /** Why it did not come back from its newest checkpoint (absent when it did). */
  note?: string;
}

/** Every manifest in the store by server, newest first along its lineage (placement epoch, then
 *  time: checkpoints' `byLineage`); a manifest that does not open is counted. */
async function manifests(store: BlobStore, engine: CheckpointEngine): Promise<{ by: Map<string, Manifest[]>; unreadable: number }> {
  const by = new Map<string, Manifest[]>();
  let unreadable = 0;
  for await (const { key } of store.list(blobKeys.manifests())) {
    const [, srv, id] = key.split('/');
    let m: Manifest | null;
    try {
      m = await engine.read(srv, id);
    } catch (e) {
      if (publicError(e) instanceof AppError && (publicError(e) as AppError).code === 'store_unavailable') throw e;
      unreadable++;
      continue;
    }
    if (m) by.set(srv, [...(by.get(srv) ?? []), m]);
  }
  for (const list of by.values()) list.sort(byLineage);
  return { by, unreadable };
}

/** A failure of the store as the operator's error: away (store_unavailable) or refusing
 *  (credentials, a missing bucket: store_refused), with what the store said; never credentials. */
const storeDown = (e: unknown, where: string): unknown => {
  const p = publicError(e);
  if (p instanceof AppError && p.code === 'store_unavailable')
    return AppError.of(
      'store_unavailable',
      `the checkpoint store ${where} cannot be reached (${(e as Error).message}); nothing was written: check checkpoints.s3.endpoint / ROOTBOX_S3_ENDPOINT and the network, then repeat`,
    );
  if (p instanceof InternalError && p.message.startsWith('the checkpoint store '))
    return AppError.of(
      'store_refused',
      `${p.message} (${(p.cause as Error | undefined)?.message ?? 'no detail'}); nothing was written: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the bucket and checkpoints.s3.region, then repeat`,
    );
  return p;
};

/** The servers' disks into `stage`, each from its newest checkpoint that materializes whole. */
async function seedDisks(store: Store, stage: string, engine: CheckpointEngine, by: Map<string, Manifest[]>): Promise<RebuiltServer[]> {
  const out: RebuiltServer[] = [];
  for (const rec of store.servers.all()) {
    const rt = store.runtime.get(rec.id);
    if (!rt || rt.pending !== undefined) continue; // a create or delete under way: reconcile removes it
    const seed = { slug: rec.slug, memoryBytes: rec.memoryBytes, diskBytes: rec.diskBytes, uidBase: rt.uidBase };
    const row: RebuiltServer = {
      id: rec.id,
      slug: rec.slug,
      account: rec.accountId,
      disk: 'fresh_disk',
      checkpoint: null,
      checkpoint_at: null,
      desired: rt.desired,
    };
    const notes: string[] = [];
    for (const m of by.get(rec.id) ?? []) {
      if (m.uidBase !== undefined && m.uidBase !== rt.uidBase) {
        notes.push(`${m.id} was taken under another uid range`);
        continue;
      }
      try {
        await seedServer(stage, rec.id, seed, (img) => engine.materialize(m, img));
        Object.assign(row, { disk: 'checkpoint', checkpoint: m.id, checkpoint_at: new Date(m.createdAt).toISOString() });
        break;
      } catch (e) {
        const p = publicError(e);
        if (!(p instanceof AppError && p.code === 'checkpoint_corrupt')) throw e; // the store away, the disk full: the whole restore stops
        notes.push(`${m.id} is damaged in the store (${(e as Error).message})`);
      }
    }
    if (row.disk === 'fresh_disk') {
      await seedServer(stage, rec.id, seed);
      row.note = [notes.length ? notes.join('; ') : 'no checkpoint in the store', 'came back with a fresh empty disk: its files are lost'].join('; ');
    } else if (notes.length) row.note = `not its newest checkpoint: ${notes.join('; ')}`;
    out.push(row);
  }
  return out;
}

/** The checkpoint records (what the API lists and bills) set to the manifests the store holds. */
async function syncIndex(store: Store, by: Map<string, Manifest[]>): Promise<void> {
  for (const rec of store.servers.all()) {
    const held = new Map((by.get(rec.id) ?? []).map((m) => [m.id, m]));
    for (const r of store.checkpoints.list(rec.id)) if (!held.has(r.id)) await store.checkpoints.remove(rec.id, r.id);
    for (const m of held.values())
      if (!store.checkpoints.get(rec.id, m.id))
        await store.checkpoints.add({
          id: m.id,
          serverId: rec.id,
          accountId: rec.accountId,
          createdAt: m.createdAt,
          kind: m.kind,
          ...(m.comment ? { comment: m.comment } : {}),
          sizeBytes: m.dataBytes,
          newBytes: m.newBytes,
        });
  }
}

function human(file: string, dir: string, where: string, servers: RebuiltServer[], strays: string[], unreadable: number): string {
  const lines = [`rebuilt ${dir} from ${file} and the checkpoint store ${where}:`];
  for (const s of servers) {
    const what = s.disk === 'checkpoint' ? `disk from checkpoint ${s.checkpoint} of ${s.checkpoint_at}` : 'NO CHECKPOINT USED';
    lines.push(
      `  ${s.id} (${s.slug}, account ${s.account}): ${what}; ${s.desired === 'running' ? 'starts' : 'stays asleep'} with the daemon${s.note ? ` — ${s.note}` : ''}`,
    );
  }
  const back = servers.filter((s) => s.disk === 'checkpoint').length;
  lines.push(`${back} of ${servers.length} servers came back from a checkpoint; ${servers.length - back} with a fresh empty disk`);
  if (strays.length)
    lines.push(
      `checkpoints of ${strays.length} servers the backup does not know (created after it, or deleted before it): ${strays.join(', ')} — not restored`,
    );
  if (unreadable) lines.push(`${unreadable} manifests in the store do not open with this box's key (another box's, or damaged): ignored`);
  lines.push('next: start the daemon on this data dir (systemctl start rootbox); it mounts every disk and starts the servers that were running');
  return lines.join('\n');
}

export interface RebuildOptions {
  file: string;
  /** A host key kept apart from the backup (one made before backups carried it). */
  hostKey?: string;
  /** Where the S3 credentials are read (the command's environment). */
  env?: NodeJS.ProcessEnv;
}

export async function rebuildCommand(cfg: Readonly<Config>, o: RebuildOptions, flags: CliFlags, io: CliOut): Promise<number> {
  const dir = resolve(cfg.dataDir);
  const where = cfg.checkpoints.store;
  if (!where)
    throw AppError.of(
      'not_configured',
      'restore --from-backup needs the checkpoint store: --store s3://bucket/prefix (or checkpoints.store / ROOTBOX_CHECKPOINT_STORE)',
    );
  if (cfg.cluster.registry)
    throw AppError.of(
      'not_configured',
      "restore --from-backup rebuilds a single box; in cluster mode the checkpoints open with the cluster's secret and the registry keeps the accounts, which this command does not rebuild",
    );
  if (o.hostKey && !existsSync(o.hostKey))
    throw AppError.of('no_host_key', `--host-key ${o.hostKey} does not exist: give the old host's secrets/host.key (a copy of it)`);
  const existed = existsSync(dir);
  mkdirSync(dir, { recursive: true, mode: 0o700 }); // locked by its own path: the daemon's data dir lock
  let lock: HostLock;
  try {
    lock = await lockDataDir(dir);
  } catch (e) {
    if (!existed) rmdirSync(dir);
    throw e;
  }
  try {
    return await rebuildLocked(cfg, o, flags, io, dir, where, existed);
  } finally {
    await lock.release();
  }
}

async function rebuildLocked(
  cfg: Readonly<Config>,
  o: RebuildOptions,
  flags: CliFlags,
  io: CliOut,
  dir: string,
  where: string,
  existed: boolean,
): Promise<number> {
  // a new disk's own filesystem mounted at the data dir holds lost+found: still a fresh data dir;
  // a staging dir is what a killed rebuild left, removed before this one starts; so is all a
  // killed rebuild placed (its mark: rebuildmark.ts) — this command holds the data dir's lock
  const names = readdirSync(dir);
  const interrupted = names.includes(REBUILD_MARK);
  const leftovers = interrupted ? names.filter((n) => n !== 'lost+found') : names.filter((n) => n.startsWith('.rebuilding-'));
  if (names.some((n) => n !== 'lost+found' && !leftovers.includes(n))) {
    if (!existed) rmdirSync(dir);
    throw AppError.of(
      'data_dir_not_empty',
      `${dir} is not empty: restore --from-backup rebuilds a box into a fresh data dir only (the plain \`rootbox restore FILE\` replaces the store of an existing one); move it aside or choose another data dir`,
    );
  }
  let blobs: BlobStore;
  try {
    blobs = openS3BlobStore(where, { ...cfg.checkpoints.s3, env: o.env }); // no credentials: refused here, before anything is made
  } catch (e) {
    if (!existed) rmdirSync(dir);
    throw e;
  }
  if (interrupted) io.err(`${dir}: an interrupted rebuild left part of a box here; it is removed and the box rebuilt`);
  for (const n of leftovers) if (n !== REBUILD_MARK) rmSync(join(dir, n), { recursive: true, force: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  // inside the data dir: on its filesystem (a new disk mounted there) and never beside another's
  const stage = join(dir, `.rebuilding-${stamp}`);
  markRebuild(dir, `restore --from-backup ${o.file} into ${stage}`);
  mkdirSync(stage, { mode: 0o700 });
  let done = false;
  try {
    const restored = await restoreStore(stage, o.file);
    const keyFile = join(stage, 'secrets', 'host.key');
    if (o.hostKey && !existsSync(keyFile)) {
      mkdirSync(dirname(keyFile), { recursive: true, mode: 0o700 });
      copyFileSync(o.hostKey, keyFile);
      chmodSync(keyFile, 0o600);
    }
    if (!existsSync(keyFile))
      throw AppError.of(
        'no_host_key',
        `${o.file} carries no host key (a backup made before rootbox kept it there) and none was given: repeat with --host-key FILE, the old host's secrets/host.key; without it no checkpoint opens`,
      );
    const engine = new CheckpointEngine({ store: blobs, secret: hostSecret(stage) });
    let found;
    try {
      found = await manifests(blobs, engine);
    } catch (e) {
      throw storeDown(e, where);
    }
    if (found.unreadable && found.by.size === 0)
      throw AppError.of(
        'store_key_mismatch',
        `none of the ${found.unreadable} checkpoint manifests in ${where} opens with the host key of ${o.file}: is it this box's backup and this box's store (checkpoints.store)?`,
      );
    const store = openStore(stage);
    let servers: RebuiltServer[];
    let strays: string[];
    try {
      const indexed = store.servers.all().reduce((n, r) => n + store.checkpoints.list(r.id).length, 0);
      if (indexed && found.by.size === 0)
        throw AppError.of(
          'store_empty',
          `${where} holds none of the ${indexed} checkpoints ${o.file} lists: is --store this box's bucket and prefix (checkpoints.store)? nothing was written`,
        );
      try {
        servers = await seedDisks(store, stage, engine, found.by);
      } catch (e) {
        throw storeDown(e, where);
      }
      await syncIndex(store, found.by);
      const known = new Set(store.servers.all({ withPending: true }).map((s) => s.id));
      strays = [...found.by.keys()].filter((id) => !known.has(id));
    } finally {
      await store.close();
    }
    rmSync(join(stage, 'db', 'lock.mdb'), { force: true });
    await run('sync', ['-f', stage], { timeoutMs: 30 * 60_000 }); // every file made (disks, store, keys) on disk before any is placed
    // the store last: a data dir without one is plainly not a whole box
    for (const name of [...readdirSync(stage).filter((n) => n !== 'db'), 'db']) renameSync(join(stage, name), join(dir, name));
    rmdirSync(stage);
    flushPath(dir);
    unmarkRebuild(dir); // removed last: until here a kill leaves the mark (a rerun clears, the daemon refuses)
    done = true;
    const body = {
      ok: true,
      data_dir: dir,
      store: where,
      schema_version: restored.schemaVersion,
      host_files: restored.hostFiles?.written ?? [],
      servers,
      from_checkpoint: servers.filter((s) => s.disk === 'checkpoint').length,
      fresh_disk: servers.filter((s) => s.disk === 'fresh_disk').length,
      unknown_servers_in_store: strays,
      unreadable_manifests: found.unreadable,
    };
    io.out(flags.json ? JSON.stringify(body, null, 2) : human(o.file, dir, where, servers, strays, found.unreadable));
    return 0;
  } finally {
    await blobs.close().catch(() => {});
    if (!done) {
      rmSync(stage, { recursive: true, force: true });
      unmarkRebuild(dir);
      if (!existed) rmdirSync(dir);
    }
  }
}
