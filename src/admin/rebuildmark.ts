// The mark of a rebuild under way (restore --from-backup, cli-rebuild.ts): `<dataDir>/.rebuild-incomplete`,
// written (and flushed) before the rebuild makes anything in the data dir and removed after its
// last rename is flushed. A rebuild killed in between leaves it: a rerun finds it and clears
// what the killed one made before it starts anew, and the daemon refuses to start on the data
// dir while it is there (its half-placed files would otherwise be taken for a box, and its
// seeded disks for orphans).

import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { flushPath } from '../durable.js';
import { AppError } from '../errors.js';

export const REBUILD_MARK = '.rebuild-incomplete';

/** Writes the mark, flushed with its directory entry. */
export function markRebuild(dataDir: string, what: string): void {
  writeFileSync(join(dataDir, REBUILD_MARK), `${what}\n`, { mode: 0o600, flush: true });
  flushPath(dataDir);
}

/** Removes the mark, flushed. */
export function unmarkRebuild(dataDir: string): void {
  rmSync(join(dataDir, REBUILD_MARK), { force: true });
  flushPath(dataDir);
}

/** The daemon's start: refused while a rebuild of the data dir is incomplete. */
export function refuseIncompleteRebuild(dataDir: string): void {
  if (existsSync(join(dataDir, REBUILD_MARK)))
    throw AppError.of(
      'rebuild_incomplete',
      `${dataDir} holds ${REBUILD_MARK}: a \`rootbox restore --from-backup\` into it was interrupted and the box in it is not whole; run the same command again (it clears what the interrupted one made and rebuilds), then start the daemon`,
    );
}
