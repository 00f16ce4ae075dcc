// Where the running daemons of this machine keep their data (issue 36 item 8): each daemon writes
// `<runDir>/<hash of its data dir>.json` (its pid, data dir, admin socket, working dir) once its
// admin socket listens and removes it when it stops, so an operator command run outside the
// daemon's working directory, given no config, finds the data dir to act on — or says which flag
// to pass when it finds none, or several. The run dir and each file are trusted only when owned by
// root or this user and writable by no one else (no symlinks): a file planted by another local
// user would steer a root command to a data dir of their choosing.

import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { answers } from './server.js';

export interface Whereabouts {
  pid: number;
  dataDir: string;
  adminSocket: string;
  cwd: string;
}

const fileOf = (runDir: string, dataDir: string) => join(runDir, `${createHash('sha256').update(dataDir).digest('hex').slice(0, 16)}.json`);

/** Why a file or dir of the run dir is not to be trusted (undefined: it is): a symlink, or owned
 *  by someone but root and this user, or writable by group or others. */
function untrusted(st: Stats, dir: boolean): string | undefined {
  if (st.isSymbolicLink()) return 'it is a symlink';
  if (dir ? !st.isDirectory() : !st.isFile()) return dir ? 'it is not a directory' : 'it is not a regular file';
  if (st.uid !== 0 && st.uid !== process.getuid?.()) return `it is owned by uid ${st.uid}, neither root nor this user`;
  const by = [st.mode & 0o020 && 'its group', st.mode & 0o002 && 'others'].filter(Boolean);
  if (by.length) return `it is writable by ${by.join(' and ')} (mode ${(st.mode & 0o7777).toString(8)})`;
  return undefined;
}

/** Why the run dir cannot be used (undefined when it can, or does not exist). */
export function runDirUnsafe(runDir: string): string | undefined {
  let st: Stats;
  try {
    st = lstatSync(runDir);
  } catch {
    return undefined; // none: nothing to read
  }
  const why = untrusted(st, true);
  return why && `the run dir ${runDir} is not used: ${why} (make it a directory owned by root, mode 0700)`;
}

/** Writes this daemon's whereabouts; answers how to take them back (at stop). Best effort: a
 *  run dir that cannot be written (not root) only costs the commands' search (`error` says why);
 *  an unsafe one (runDirUnsafe) is left alone and `unsafe` says why. */
export function announce(runDir: string, w: Omit<Whereabouts, 'pid' | 'cwd'>): { file?: string; error?: string; unsafe?: string; remove(): void } {
  const file = fileOf(runDir, w.dataDir);
  try {
    mkdirSync(runDir, { recursive: true, mode: 0o700 });
    const unsafe = runDirUnsafe(runDir);
    if (unsafe) return { unsafe, remove: () => {} };
    const body: Whereabouts = { pid: process.pid, cwd: process.cwd(), ...w };
    rmSync(`${file}.tmp`, { force: true }); // a stale one (a symlink is removed, not followed)
    writeFileSync(`${file}.tmp`, JSON.stringify(body) + '\n', { mode: 0o644, flag: 'wx' }); // O_EXCL: never through a symlink
    renameSync(`${file}.tmp`, file);
  } catch (e) {
    return { error: `the whereabouts in ${runDir} cannot be written: ${(e as Error).message}`, remove: () => {} };
  }
  return {
    file,
    remove: () => {
      try {
        const now = JSON.parse(readFileSync(file, 'utf8')) as Whereabouts;
        if (now.pid === process.pid) rmSync(file, { force: true }); // a later daemon's is its own
      } catch {
        // gone already
      }
    },
  };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** The daemons of this machine that answer on their admin socket now (a killed one's file is
 *  skipped, and removed when its process is gone). Files that are not trusted (see untrusted) are
 *  ignored; an unsafe run dir (runDirUnsafe) is not read. */
export async function runningDaemons(runDir: string): Promise<Whereabouts[]> {
  let names: string[];
  if (runDirUnsafe(runDir)) return [];
  try {
    names = readdirSync(runDir).filter((n) => n.endsWith('.json'));
  } catch {
    return [];
  }
  const found: Whereabouts[] = [];
  for (const n of names) {
    try {
      if (untrusted(lstatSync(join(runDir, n)), false)) continue; // planted by someone else
      const w = JSON.parse(readFileSync(join(runDir, n), 'utf8')) as Whereabouts;
      if (!alive(w.pid)) rmSync(join(runDir, n), { force: true });
      else if (typeof w.dataDir === 'string' && (await answers(w.adminSocket))) found.push(w);
    } catch {
      // half-written or not ours
    }
  }
  return found;
}

/** The flags that choose a data dir, for the messages. */
export const DATA_DIR_FLAGS = "--config FILE (the daemon's config file) or ROOTBOX_DATA_DIR=DIR (its dataDir)";

/** The data dir an operator command acts on. `explicit`: the operator chose it (--config,
 *  ROOTBOX_CONFIG, ROOTBOX_DATA_DIR, /etc/rootbox/config.json): it is used as is, as is a default
 *  (`./var`) that holds a store. Otherwise the daemon running on this machine's; `error` when
 *  there is none or several (the message names the flag to pass), `note` when one was taken. */
export async function locateDataDir(o: {
  dataDir: string;
  explicit: boolean;
  runDir: string;
}): Promise<{ dataDir: string; note?: string } | { error: string }> {
  if (o.explicit || existsSync(join(o.dataDir, 'db'))) return { dataDir: o.dataDir };
  const unsafe = runDirUnsafe(o.runDir);
  if (unsafe) return { error: `rootbox: ${unsafe}: pass ${DATA_DIR_FLAGS}` };
  const running = await runningDaemons(o.runDir);
  if (running.length === 1)
    return { dataDir: running[0].dataDir, note: `rootbox: using ${running[0].dataDir}, the data dir of the daemon running here (pid ${running[0].pid})` };
  if (running.length > 1)
    return {
      error: `rootbox: ${running.length} daemons run on this machine (${running.map((w) => `pid ${w.pid}: ${w.dataDir}`).join('; ')}): pass ${DATA_DIR_FLAGS} to say which`,
    };
  return {
    error: `rootbox: no rootbox data dir at ${o.dataDir} and no daemon running on this machine (none in ${o.runDir}): pass ${DATA_DIR_FLAGS}`,
  };
}
