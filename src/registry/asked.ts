// The servers this host asked another host to take and whose move's outcome it has not learnt yet
// (issue 38, a review's fence hole), kept across a restart. From the moment a move's source sends
// the adopt request (moves/source.ts) the target may take the server's placement; if the answer is
// lost while the registry cannot say, and this daemon stops or is killed, a run started again with
// the registry still away must not start its own copy from what it has: the target may run it. So
// the source marks the server here — written and flushed, with the directory, before the request
// goes — and removes the mark once the outcome is known (the target's answer read and the copy
// forgotten, the target's refusal, or the registry's placement read). While a server is marked the
// wake fence (fence.ts) starts or thaws it only on a placement read in that check; a restarted
// run's moves part holds its requests and settles it once the registry answers (moves/asked.ts).
//
// One small file per server in `<dataDir>/cluster-moves-asked/` (its name the server's id): its
// existence is the mark, so a torn write still marks, two moves' marks never rewrite each other,
// and the mark is read when the registry part is made — before the boot's reconcile asks the wake
// fence anything. Not the LMDB store: the registry imports no store (the module map), and the
// fence reads it synchronously from its constructor on, as it does `cluster-fence.json`
// (fencestate.ts) for the same reason. A directory that cannot be read (EACCES, EIO; not absent)
// fails safe: every server is taken as marked — its starts refused while the registry is away,
// each settled by the moves part once it answers — and the error logged once.

import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { flushPath, replaceFile } from '../durable.js';

/** The directory of the marks (one file per server). */
export function askedDir(dataDir: string): string {
  return join(dataDir, 'cluster-moves-asked');
}

/** What a mark records: the target asked, the epoch the source read, since when (wall-clock ms),
 *  and whether the server ran when its move began (it runs here again if the move did not happen). */
export interface AskedMove {
  to?: string;
  epoch?: number;
  since: number;
  running?: boolean;
  /** Not a mark read: the marks' directory could not be read, so every server is taken as marked. */
  unread?: boolean;
}

const ID = /^srv_[0-9a-f]{1,32}$/;

/** The marks, in memory and (with `dir`) on disk; `dir` absent: memory only (tests of the fence alone). */
export class AskedMoves {
  private readonly marks = new Map<string, AskedMove>();

  /** When the marks' directory could not be read (not absent: EACCES, EIO): every server is taken
   *  as marked (the safe side) until the registry said where it is (`clear`: `answered`). */
  private unreadAt: number | undefined;
  private readonly answered = new Set<string>();

  /** The directory made and its entry in the data dir flushed (once per run). */
  private made = false;

  constructor(
    private readonly dir?: string,
    private readonly onError: (what: string, err: unknown) => void = () => {},
    /** Flushes a directory's entries (tests see which). */
    private readonly flushDir: (dir: string) => void = flushPath,
  ) {
    if (!dir) return;
    let names: string[] = [];
    try {
      names = readdirSync(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        this.unreadAt = Date.now();
        onError('the marks of moves asked could not be read: every server is taken as marked until the registry says where it is', err);
      }
    }
    for (const name of names) {
      if (!ID.test(name)) continue; // a `.tmp` a kill left: its rename never happened, the mark was never made
      let m: Partial<AskedMove> = {};
      try {
        m = JSON.parse(readFileSync(join(dir, name), 'utf8')) as Partial<AskedMove>;
      } catch {
        // present but unreadable: still marked (the safe side)
      }
      this.marks.set(name, {
        to: typeof m?.to === 'string' ? m.to : undefined,
        epoch: Number.isFinite(m?.epoch) ? m.epoch : undefined,
        since: Number.isFinite(m?.since) ? m.since! : Date.now(),
        running: m?.running === true,
      });
    }
  }

  /** Marks `id` asked; on disk (flushed, the directory too) before it returns. Throws when it could
   *  not be kept there: the move must not ask without it. */
  mark(id: string, m: Omit<AskedMove, 'since'> & { since?: number }): void {
    if (!ID.test(id)) throw new Error(`not a server id: ${id.slice(0, 40)}`);
    const mark: AskedMove = { ...m, since: m.since ?? Date.now() };
    if (this.dir) {
      if (!this.made) {
        // a host's first move makes the directory: its entry in the data dir flushed too, else a
        // power loss can drop the directory with the mark in it
        mkdirSync(this.dir, { recursive: true, mode: 0o700 });
        this.flushDir(dirname(this.dir));
        this.made = true;
      }
      const file = join(this.dir, id);
      replaceFile(file, JSON.stringify(mark) + '\n', { flushDir: this.flushDir });
    }
    this.marks.set(id, mark);
  }

  has(id: string): boolean {
    return this.marks.has(id) || (this.unreadAt !== undefined && !this.answered.has(id) && ID.test(id));
  }

  get(id: string): Readonly<AskedMove> | undefined {
    return this.marks.get(id) ?? (this.has(id) ? { since: this.unreadAt!, unread: true } : undefined);
  }

  /** The servers marked now (those read; with `unreadable`, every other server too until cleared). */
  list(): string[] {
    return [...this.marks.keys()];
  }

  /** Whether the marks' directory could not be read when this run started: every server not cleared since is marked. */
  get unreadable(): boolean {
    return this.unreadAt !== undefined;
  }

  /** The move's outcome is known: the mark removed (a failure to remove it is logged; the next
   *  start settles it again from the registry). */
  clear(id: string): void {
    const had = this.marks.delete(id);
    if (this.unreadAt !== undefined) this.answered.add(id);
    // its file whether marked in memory or not: a mark() that threw after its rename (the
    // directory's fsync) left the file though not the mark in memory
    if (!this.dir || !ID.test(id)) return;
    try {
      try {
        rmSync(join(this.dir, id));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // none: nothing to flush
        if (!had && this.unreadAt !== undefined) return; // the directory unreadable: logged once, at the start
        throw err;
      }
      this.flushDir(this.dir);
    } catch (err) {
      this.onError('the mark of a move whose outcome is known could not be removed: the next start settles it again', err);
    }
  }
}
