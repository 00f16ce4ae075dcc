// The settlement journal: which payments may have been sent for settlement, written before
// anything is sent, so the paid path waits for no lmdb commit there. One line per payment (its
// key and its pending change: the settle request) appended with a plain write(2): in the file
// (the kernel's page cache) once the call returns, so it survives a kill of the process, like an
// lmdb commit, and costs no thread hop, commit or fdatasync. The pending mark itself is written to
// lmdb meanwhile without being waited for (PaymentStore.updateLater). At start the journal is read
// before anything else: a payment still `locked` in lmdb that it names turns pending, synced, and
// the reconciler finishes it; then the journal is emptied. While running it is emptied once every
// payment it names has left `locked` in lmdb's committed state. A power cut before the kernel wrote
// the line back leaves the record `locked`, resolved at start as one interrupted — what a pending
// mark lost in lmdb's flush left before.

import { closeSync, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';

export interface SettlingEntry<C> {
  key: [string, string, string];
  change: C;
}

/** Lines are kept until this many payments are named, then the journal is emptied when it can be. */
const COMPACT_AT = 32;

export class SettlingJournal<C> {
  private readonly fd: number;
  /** The keys named in the file now, by their joined form. */
  private readonly named = new Map<string, [string, string, string]>();

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
    writeSync(this.fd, JSON.stringify(entry) + '\n');
    this.named.set(entry.key.join(':'), entry.key);
  }

  /** Empties the file once enough payments are named and `resolved` says none of them needs it. */
  compact(resolved: (key: [string, string, string]) => boolean): void {
    if (this.named.size < COMPACT_AT) return;
    for (const key of this.named.values()) if (!resolved(key)) return;
    this.clear();
  }

  clear(): void {
    ftruncateSync(this.fd, 0);
    this.named.clear();
  }

  close(): void {
    closeSync(this.fd);
  }
}
