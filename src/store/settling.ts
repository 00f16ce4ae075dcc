// The settlement journal: which payments may have been sent for settlement, written before
// anything is sent, so the paid path waits for no lmdb commit there. One line per payment (its
// key and its pending change: the settle request) appended with a plain write(2): in the file
// (the kernel's page cache) once the call returns, so it survives a kill of the process, like an
// lmdb commit, and costs no thread hop, commit or fdatasync. The pending mark itself is written to
// lmdb meanwhile without being waited for (PaymentStore.updateLater). At start the journal is read
// before anything else: a payment still `locked` in lmdb that it names turns pending, synced, and
// the reconciler finishes it; then the journal is emptied. While running it is rewritten, every
// COMPACT_AT payments, without those that have left `locked` in lmdb's committed state. A power cut before the kernel wrote
// the line back leaves the record `locked`, resolved at start as one interrupted — what a pending
// mark lost in lmdb's flush left before.

import { closeSync, openSync, readFileSync, renameSync, writeFileSync, writeSync } from 'node:fs';

export interface SettlingEntry<C> {
  key: [string, string, string];
  change: C;
}

/** Once this many payments are named, the journal is rewritten with only those still needed. */
const COMPACT_AT = 32;

export class SettlingJournal<C> {
  private fd: number;
  /** The entries in the file now, by their key joined, with their line. */
  private readonly named = new Map<string, { key: [string, string, string]; line: string }>();

  constructor(private readonly file: string) {
    this.fd = openSync(file, 'a+', 0o600);
  }

  /** Every entry in the file (a line cut short by a power cut is left out). */
  read(): SettlingEntry<C>[] {
    const out: SettlingEntry<C>[] = [];
    for (const line of readFileSync(this.file, 'utf8').split('\n')) {
      if (!line) continue;
      try {
        const e = JSON.parse(line) as SettlingEntry<C>;
        if (Array.isArray(e.key) && e.key.length === 3 && e.change) out.push(e);
      } catch {
        // a torn last line: its payment was not yet sent for settlement
      }
    }
    return out;
  }

  /** Appends an entry; in the file when it returns. */
  append(entry: SettlingEntry<C>): void {
    const line = JSON.stringify(entry) + '\n';
    writeSync(this.fd, line);
    this.named.set(entry.key.join(':'), { key: entry.key, line });
  }

  /** Once enough payments are named, rewrites the file with only those `resolved` does not yet
   *  say are resolved (a new file renamed over the old one: a kill in between leaves either
   *  whole), so it stays small however many settlements overlap. */
  compact(resolved: (key: [string, string, string]) => boolean): void {
    if (this.named.size < COMPACT_AT) return;
    for (const [id, e] of this.named) if (resolved(e.key)) this.named.delete(id);
    const tmp = `${this.file}.new`;
    writeFileSync(tmp, [...this.named.values()].map((e) => e.line).join(''), { mode: 0o600 });
    renameSync(tmp, this.file);
    closeSync(this.fd);
    this.fd = openSync(this.file, 'a+', 0o600);
  }

  /** Empties the file (at start, once every entry it had was applied). */
  clear(): void {
    writeFileSync(this.file, '', { mode: 0o600 });
    this.named.clear();
  }

  /** How many payments the file names (tests). */
  get size(): number {
    return this.named.size;
  }

  close(): void {
    closeSync(this.fd);
  }
}
