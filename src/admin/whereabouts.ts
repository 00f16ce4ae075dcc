// Where the running daemons of this machine keep their data (issue 36 item 8): each daemon writes
// `<runDir>/<hash of its data dir>.json` (its pid, data dir, admin socket, working dir) once its
// admin socket listens and removes it when it stops, so an operator command run outside the
// daemon's working directory, given no config, finds the data dir to act on — or says which flag
// to pass when it finds none, or several.

import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { answers } from './server.js';

export interface Whereabouts {
  pid: number;
  dataDir: string;
  adminSocket: string;
  cwd: string;
}

const fileOf = (runDir: string, dataDir: string) => join(runDir, `${createHash('sha256').update(dataDir).digest('hex').slice(0, 16)}.json`);

/** Writes this daemon's whereabouts; answers how to take them back (at stop). Best effort: a
 *  run dir that cannot be written (not root) only costs the commands' search. */
export function announce(runDir: string, w: Omit<Whereabouts, 'pid' | 'cwd'>): { file?: string; remove(): void } {
  const file = fileOf(runDir, w.dataDir);
  try {
    mkdirSync(runDir, { recursive: true, mode: 0o755 });
    const body: Whereabouts = { pid: process.pid, cwd: process.cwd(), ...w };
    writeFileSync(`${file}.tmp`, JSON.stringify(body) + '\n', { mode: 0o644 });
    renameSync(`${file}.tmp`, file);
  } catch {
    return { remove: () => {} };
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
 *  skipped, and removed when its process is gone). */
export async function runningDaemons(runDir: string): Promise<Whereabouts[]> {
  let names: string[];
  try {
    names = readdirSync(runDir).filter((n) => n.endsWith('.json'));
  } catch {
    return [];
  }
  const found: Whereabouts[] = [];
  for (const n of names) {
    try {
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
