// A fork's own identity (issue 37): a server's disk copied into a new server must not carry the
// identity files its source generated inside itself, as cloud images are cleaned when cloned —
// its SSH host keys (/etc/ssh/ssh_host_*: a client that trusts the source would trust the fork)
// are removed (an sshd in the fork needs `ssh-keygen -A`, as on a cloned cloud image), and its
// machine id (/etc/machine-id, and dbus's /var/lib/dbus/machine-id where it is a file of its own)
// is replaced by a new random one: what systemd does on the first boot of an emptied one, done
// here because a server's init is not systemd.
//
// It runs on the fork's root before its first start: nothing runs in it, so no link can be
// swapped under the walk; and it never follows one — /etc, /etc/ssh and /var/lib/dbus must be
// real directories, a key that is a link is the link removed, a machine id that is a link is left.

import { randomBytes } from 'node:crypto';
import { chownSync, lstatSync, readdirSync, rmSync, writeFileSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { realDir } from './nolinks.js';

const MACHINE_IDS = ['etc/machine-id', 'var/lib/dbus/machine-id'];

/** What resetIdentity changed: the host keys removed and the machine-id files rewritten (paths in the server). */
export interface IdentityReset {
  removed: string[];
  machineIds: string[];
}

/** Removes the SSH host keys and gives a new machine id to the root of a new server made from
 *  another's disk (runtime.create of a fork). */
export function resetIdentity(rootfs: string): IdentityReset {
  const out: IdentityReset = { removed: [], machineIds: [] };
  const ssh = realDir(rootfs, 'etc/ssh');
  if (ssh)
    for (const name of readdirSync(ssh)) {
      if (!name.startsWith('ssh_host_')) continue;
      rmSync(join(ssh, name), { force: true, recursive: true }); // unlinks a link, never its target
      out.removed.push(`/etc/ssh/${name}`);
    }
  const id = `${randomBytes(16).toString('hex')}\n`;
  for (const rel of MACHINE_IDS) {
    const cut = rel.lastIndexOf('/');
    const dir = realDir(rootfs, rel.slice(0, cut));
    if (!dir) continue;
    const path = join(dir, rel.slice(cut + 1));
    let st: Stats;
    try {
      st = lstatSync(path);
    } catch {
      continue; // none: nothing to reset
    }
    // a link (dbus's to /etc/machine-id) follows the file it names; an empty one is "not yet made"
    if (!st.isFile() || st.size === 0) continue;
    rmSync(path, { force: true });
    writeFileSync(path, id, { mode: st.mode & 0o777, flag: 'wx' }); // wx: never through a link
    chownSync(path, st.uid, st.gid);
    out.machineIds.push(`/${rel}`);
  }
  return out;
}
