// Copies of servers' disks a returning host kept aside instead of deleting them (issue 38): a
// server the registry now places on another host (moved or recovered while this host was away or
// cut off) whose disk here was written after the newest checkpoint that holds it. The copy is the
// operator's to look at (the disk image: mount it read-only, `mount -o loop,ro`); nothing starts
// it. Each one is `<dataDir>/lost+found/<server>-<when>.img` (a consistent copy taken as a
// checkpoint's is, a reflink where the data dir supports it) and a `.json` note beside it,
// written last (an image without its note is an interrupted keep: `rootbox doctor` lists the notes).

import { copyFileSync, linkSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const LOST_FOUND = 'lost+found';

/** What the note beside a kept disk says. */
export interface KeptAside {
  server: string;
  slug: string;
  accountId: string;
  /** The image's file name in the lost+found dir. */
  image: string;
  /** When this host's disk was last written (ms since the epoch). */
  diskWrittenAt: number;
  /** When the newest checkpoint that holds this host's copy was taken (absent: none is known). */
  checkpointAt?: number;
  /** The host the registry places the server on now. */
  placedOn?: string;
  /** The host uid the server's root had here (its files' owners on the disk). */
  uidBase: number;
  keptAt: number;
}

export const lostFoundDir = (dataDir: string) => join(dataDir, LOST_FOUND);

/** Keeps the image at `copy` (a consistent copy of the server's disk; linked, or copied across
 *  filesystems) in the data dir's lost+found with its note; returns the image's path. */
export function keepAside(dataDir: string, copy: string, note: Omit<KeptAside, 'image' | 'keptAt'>, now = Date.now()): string {
  const dir = lostFoundDir(dataDir);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const name = `${note.server}-${new Date(now).toISOString().replace(/[:.]/g, '-')}`;
  const image = join(dir, `${name}.img`);
  const staged = `${image}.part`;
  rmSync(staged, { force: true });
  try {
    linkSync(copy, staged);
  } catch {
    copyFileSync(copy, staged);
  }
  renameSync(staged, image);
  const full: KeptAside = { ...note, image: `${name}.img`, keptAt: now };
  writeFileSync(join(dir, `${name}.json.part`), JSON.stringify(full, null, 2) + '\n', { mode: 0o600 });
  renameSync(join(dir, `${name}.json.part`), join(dir, `${name}.json`));
  return image;
}

/** Every copy kept aside in the data dir (its notes), oldest first; none when there is no lost+found. */
export function keptAside(dataDir: string): KeptAside[] {
  let names: string[];
  try {
    names = readdirSync(lostFoundDir(dataDir));
  } catch {
    return [];
  }
  const out: KeptAside[] = [];
  for (const n of names.filter((x) => x.endsWith('.json')).sort()) {
    try {
      out.push(JSON.parse(readFileSync(join(lostFoundDir(dataDir), n), 'utf8')) as KeptAside);
    } catch {
      // a note that cannot be read is not listed (the image stays for the operator)
    }
  }
  return out.sort((a, b) => a.keptAt - b.keptAt);
}
