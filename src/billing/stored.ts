// What a server's checkpoints are billed for (issue 37): the bytes each added to the store. Read
// by the meter (GB-months), /credits (checkpoint_bytes) and the book (each host's figure in the
// registry); its own file so none of them imports another for it.

import type { Store } from '../store/index.js';

/** The checkpoint bytes a server is billed for: what each of its checkpoints added to the store
 *  when it was taken (its new sealed chunks, measured by the engine as it wrote them). A chunk
 *  shared by several checkpoints is counted once, by the one that stored it first; when that one
 *  is deleted, its chunks later ones still use are no longer billed (they stay until the others
 *  go). Deduplication across servers (a fork shares its source's chunks) is each server's own:
 *  a fork's first checkpoint stores only what it does not share. */
export function storedCheckpointBytes(store: Pick<Store, 'checkpoints'>, serverId: string): number {
  let n = 0;
  for (const c of store.checkpoints.list(serverId)) if (Number.isFinite(c.newBytes) && c.newBytes > 0) n += c.newBytes;
  return n;
}
