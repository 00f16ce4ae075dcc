// Whether the self-fence's stop is settled, kept across a restart (issue 38 review). Once the
// fence reached its stop step (selffence.ts) — or the watchdog that outlives the daemon killed its
// servers (runtime/fencewatch.ts writes the same file) —, another host may have recovered any of
// this host's servers: until the registry answered and the placements were read (`healed`),
// nothing starts or thaws from what this host alone knows (fence.ts). A daemon restarted meanwhile
// must keep that rule, so the mark lives in `<dataDir>/cluster-fence.json` (written whole and
// flushed before any server is stopped, renamed into place and its directory flushed, so a power
// loss after the stop keeps it; removed once settled), read when the
// registry part is made — before the boot's reconcile asks the wake fence anything.
//
// A file beside `cluster-contact.json`, not the LMDB store: the registry imports no store (the
// module map), the watchdog (a shell loop) writes it too, and it is this one small fact. It is not
// derived from the registry or the lease at start: the registry is exactly what may be away then,
// and the saved contact is no proof either (a peer that answered ended the fence and refreshed it,
// with the stop still unsettled).

import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { replaceFile } from '../durable.js';

/** The file that marks the fence's stop unsettled (the watchdog is given the same path: main.ts). */
export function fenceStateFile(dataDir: string): string {
  return join(dataDir, 'cluster-fence.json');
}

/** What the file says: since when (wall-clock ms) the stop is unsettled, and who marked it. */
interface Mark {
  since: number;
  by?: 'fence' | 'watchdog';
}

/** The fence's stop, settled or not; `file` absent: kept in memory only (tests of the fence alone). */
export class FenceSettlement {
  private mark?: Mark;

  constructor(
    private readonly file?: string,
    private readonly onError: (what: string, err: unknown) => void = () => {},
  ) {
    if (!file) return;
    try {
      const m = JSON.parse(readFileSync(file, 'utf8')) as Mark;
      this.mark = { since: Number.isFinite(m?.since) ? m.since : Date.now(), by: m?.by };
    } catch (err) {
      // absent: settled. Present but unreadable (a torn write): unsettled, the safe side
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.mark = { since: Date.now() };
    }
  }

  /** Whether the fence stopped (or tried to stop) servers and their placements were not read since. */
  get unsettled(): boolean {
    return this.mark !== undefined;
  }

  /** Since when (wall-clock ms), and who marked it; undefined while settled. */
  get since(): Readonly<Mark> | undefined {
    return this.mark;
  }

  /** Marks the stop unsettled (kept on disk before it returns); a mark already there is kept. */
  stopping(now = Date.now()): void {
    if (this.mark) return;
    this.mark = { since: now, by: 'fence' };
    if (!this.file) return;
    try {
      replaceFile(this.file, JSON.stringify(this.mark) + '\n');
    } catch (err) {
      this.onError('the self-fence could not keep its unsettled stop in the data dir: a restart before it settles would forget it', err);
    }
  }

  /** The placements were read after the stop: settled, the mark removed. */
  settled(): void {
    if (!this.mark) return;
    this.mark = undefined;
    if (!this.file) return;
    try {
      rmSync(this.file, { force: true });
    } catch (err) {
      this.onError('the self-fence could not remove its settled mark: the next start settles it again', err);
    }
  }
}
