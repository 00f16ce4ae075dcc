// Workspace persistence of rootbox/agents sessions (agents-session.ts): through checkpoints where
// the host has them, as a tar of the workspace otherwise. A checkpoint's persisted form is a short
// reference (MAGIC, then JSON naming the server and the checkpoint) instead of the files: hydrating
// it into the same server restores the checkpoint; into another sandbox it forks the checkpoint's
// server and the session moves onto the fork (its previous server is deleted), as a provider whose
// snapshots are images swaps its sandbox. A checkpoint lives as long as its server: persist with
// 'tar' (or keep the server, pauseOnExit) for a workspace that must outlive it.

import { SandboxArchiveError } from '@openai/agents-core/sandbox';
import { shellQuote } from '@openai/agents-core/sandbox/internal';
import { RootboxError } from './errors.js';
import type { Server } from './server.js';

/** How a session persists its workspace: true (the default) through a checkpoint, as a tar when
 *  the host has no checkpoints; 'checkpoint' only through one; 'tar' only as a tar. */
export type WorkspacePersistence = true | 'checkpoint' | 'tar';

export const MAGIC = 'ROOTBOX_CHECKPOINT_V1\n';

export interface CheckpointRef {
  server: string;
  checkpoint: string;
  root: string;
}

/** What persistence needs of a session: its server (which a fork replaces) and workspace root. */
export interface Persisting {
  server: Server;
  readonly root: string;
  readonly mode: WorkspacePersistence;
  /** A handle on another server of the account, by id. */
  open(id: string): Server;
  /** Moves the session onto `server` (a fork): the previous one is the caller's to delete. */
  moveTo(server: Server): void;
  /** Ends what runs on the server (terminals) before its disk changes under it. */
  quiesce(): void;
}

const archiveError = (what: string, e: unknown, root: string) =>
  new SandboxArchiveError(`RootboxSandboxClient failed to ${what}: ${e instanceof Error ? e.message : String(e)}`, {
    provider: 'rootbox',
    root,
    ...(e instanceof RootboxError ? { code: e.code, status: e.status } : {}),
  });

/** The host cannot checkpoint (not_configured) or its store is away (store_unavailable): a tar will do. */
const noCheckpoints = (e: unknown) => e instanceof RootboxError && (e.code === 'not_configured' || e.code === 'store_unavailable');

/** The reference a persisted checkpoint is, or undefined for anything else (a tar). */
export function refOf(data: Uint8Array): CheckpointRef | undefined {
  const head = new TextEncoder().encode(MAGIC);
  if (data.byteLength < head.byteLength || !head.every((b, i) => data[i] === b)) return undefined;
  let ref: Partial<CheckpointRef> | null = null;
  try {
    ref = JSON.parse(new TextDecoder().decode(data.subarray(head.byteLength))) as Partial<CheckpointRef> | null;
  } catch {
    ref = null;
  }
  if (!ref || typeof ref.server !== 'string' || typeof ref.checkpoint !== 'string')
    throw new SandboxArchiveError('a rootbox checkpoint reference without its server or checkpoint', { provider: 'rootbox' });
  return { server: ref.server, checkpoint: ref.checkpoint, root: String(ref.root ?? '') };
}

export async function persist(s: Persisting): Promise<Uint8Array> {
  if (s.mode !== 'tar') {
    try {
      const cp = await s.server.checkpoint({ comment: `workspace ${s.root}`.slice(0, 200) });
      const ref: CheckpointRef = { server: s.server.id, checkpoint: cp.id, root: s.root };
      return new TextEncoder().encode(MAGIC + JSON.stringify(ref));
    } catch (e) {
      if (s.mode === 'checkpoint' || !noCheckpoints(e)) throw archiveError('checkpoint the workspace', e, s.root);
    }
  }
  try {
    return await s.server.files.download(s.root);
  } catch (e) {
    throw archiveError('persist the workspace', e, s.root);
  }
}

export async function hydrate(s: Persisting, bytes: Uint8Array): Promise<void> {
  const ref = refOf(bytes);
  if (!ref) return hydrateTar(s, bytes);
  s.quiesce();
  if (ref.server === s.server.id) {
    try {
      await s.server.restore(ref.checkpoint);
    } catch (e) {
      throw archiveError(`restore checkpoint ${ref.checkpoint}`, e, s.root);
    }
    return;
  }
  let fork: Server;
  try {
    fork = await s.open(ref.server).fork({ checkpoint: ref.checkpoint });
  } catch (e) {
    throw archiveError(`fork checkpoint ${ref.checkpoint} of ${ref.server} (a checkpoint goes with its server)`, e, s.root);
  }
  const previous = s.server;
  s.moveTo(fork);
  await previous.delete().catch((e: unknown) => {
    if (!(e instanceof RootboxError && e.code === 'server_not_found')) throw archiveError(`delete the replaced server ${previous.id}`, e, s.root);
  });
}

/** Replaces the workspace with a tar archive. */
async function hydrateTar(s: Persisting, bytes: Uint8Array): Promise<void> {
  const root = s.root;
  if (root === '/') throw new SandboxArchiveError('RootboxSandboxClient refuses to hydrate a workspace at /.', { provider: 'rootbox', root });
  try {
    const cleared = await s.server.exec(`mkdir -p -- ${shellQuote(root)} && find ${shellQuote(root)} -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +`);
    if (cleared.exitCode !== 0) throw new Error(cleared.stderr.trim());
    await s.server.files.upload(root, bytes);
  } catch (e) {
    throw archiveError('hydrate the workspace', e, root);
  }
}
