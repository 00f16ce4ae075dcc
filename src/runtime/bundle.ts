// Files the runtime writes for a server on the host: its OCI bundle's config.json (written to a
// temporary name, synced, then renamed over the old one: it is where the applied memory limit is
// kept across daemon restarts) and the files a new server starts with that name it (hostname,
// hosts, resolver), written without following any symlink in the image.

import { chownSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { replaceFile } from '../durable.js';
import { resolvConf } from './image.js';
import { realDir } from './nolinks.js';

/** Replaces `path` with `text` so a crash leaves either the old file or the whole new one (its
 *  directory not flushed: a power loss may leave the old one, as a create's first file is
 *  written again by the next start). */
export function writeDurably(path: string, text: string): void {
  replaceFile(path, text, { flushDir: false });
}

/** Files a new server starts with that depend on it (hostname, hosts, resolver), owned by its root.
 *  Written only into a real /etc of the root (a fork's or a moved server's /etc may be a link the
 *  tenant made: it is left as it is, never followed); each file replaced, never written through
 *  a link. Answers whether they were written. */
export function personalise(rootfs: string, uidBase: number, slug: string): boolean {
  const etc = realDir(rootfs, 'etc');
  if (!etc) return false;
  const files: [string, string][] = [
    ['hostname', `${slug}\n`],
    ['hosts', `127.0.0.1\tlocalhost\n127.0.1.1\t${slug}\n::1\tlocalhost ip6-localhost ip6-loopback\n`],
    ['resolv.conf', resolvConf()],
  ];
  for (const [name, text] of files) {
    const p = join(etc, name);
    rmSync(p, { force: true, recursive: true }); // resolv.conf may be a symlink in some images: removed, never followed
    writeFileSync(p, text, { mode: 0o644, flag: 'wx' });
    chownSync(p, uidBase, uidBase);
  }
  return true;
}
