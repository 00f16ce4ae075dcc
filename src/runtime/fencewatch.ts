// The self-fence that does not depend on the daemon (issue 38, review H1). Containers outlive the
// daemon by design (systemd KillMode=process), so a daemon stopped for an upgrade, crash-looping or
// killed leaves its servers running while nothing of it answers: its lease lapses, its channel is
// silent, and once `recoverAfter` has passed the others recover those servers from their
// checkpoints — two hosts, two diverging disks. The daemon's own fence (registry/selffence.ts)
// dies with it; this watchdog does not.
//
// A small detached shell loop (its own session: `systemctl stop` signals the daemon alone) reads a
// file the daemon rewrites every tick, `<dataDir>/fence-watch`:
//   line 1: the last contact, wall-clock ms (registry/contact.ts: the registry, a peer that
//           vouches, or every peer at once), the daemon's pid and its start time (/proc stat field
//           22: a pid reused after the daemon's death is not it), the watchdog meant to act;
//   line 2: the cgroup version;
//   then:   the cgroup directory (freezer hierarchy on v1) of each server that runs.
// Before it kills anything it writes the daemon's mark that the fence's stop is unsettled (`settle`,
// registry/fencestate.ts's file): the next daemon starts or thaws nothing before it has read where
// its servers are placed now (another host may have recovered them). The mark is flushed, renamed
// into place and its directory flushed (coreutils `sync FILE` fsyncs what it opens, a directory
// too) before the first kill, so a power loss after the kill cannot lose it.
// While the daemon lives, its own fence acts and the watchdog only thaws what it froze itself once
// contact is fresh again. Once the daemon is gone, it freezes every listed server that is not
// frozen already (a doze is not its to thaw) when the contact is `freezeMs` old, and kills every
// task of every listed server when it is `stopMs` old — the same bounds as the daemon's fence
// (deadhost.ts: a quarter and half of recoverAfter), so the servers are stopped before anyone may
// count this host dead. A daemon started again rewrites the file for a watchdog of its own; the
// old one leaves once it holds no freeze. The file removed (a stop with nothing left running, or
// a single box), or its servers killed: the watchdog leaves. A killed server is found stopped by the next daemon's
// reconcile, as after a crash; a frozen one is adopted as dozing.

import { spawn } from 'node:child_process';
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = '/sys/fs/cgroup';
const V2 = existsSync(join(ROOT, 'cgroup.controllers'));

/** The watchdog: POSIX sh and coreutils. $1 file, $2 freeze ms, $3 stop ms, $4 the pause between checks (s), $5 the unsettled mark's file (or ''). */
const SCRIPT = String.raw`
f="$1"; fz="$2"; st="$3"; every="$4"; mark="$5"; me=$$; froze=""
frozen() { if [ "$v" = v2 ]; then grep -qx 'frozen 1' "$1/cgroup.events" 2>/dev/null; else [ "$(cat "$1/freezer.state" 2>/dev/null)" = FROZEN ]; fi; }
setf() { if [ "$v" = v2 ]; then echo "$2" > "$1/cgroup.freeze"; elif [ "$2" = 1 ]; then echo FROZEN > "$1/freezer.state"; else echo THAWED > "$1/freezer.state"; fi; }
while :; do
  sleep "$every"
  [ -r "$f" ] || exit 0
  { read at dpid dstart wpid; read v; dirs=$(cat); } < "$f" 2>/dev/null || continue
  case "$at" in ''|*[!0-9]*) continue;; esac
  if [ "$wpid" != "$me" ] && [ -z "$froze" ]; then exit 0; fi
  age=$(( $(date +%s%3N) - at ))
  if [ "$age" -lt "$fz" ]; then
    for d in $froze; do setf "$d" 0 2>/dev/null; done; froze=""; continue
  fi
  if [ -r "/proc/$dpid/stat" ] && [ "$(cut -d' ' -f22 "/proc/$dpid/stat" 2>/dev/null)" = "$dstart" ]; then continue; fi
  [ "$wpid" = "$me" ] || continue
  if [ "$age" -ge "$st" ] && [ -n "$mark" ] && [ -n "$dirs" ] && [ ! -e "$mark" ]; then
    printf '{"since":%s,"by":"watchdog"}\n' "$(date +%s%3N)" > "$mark.tmp" && sync "$mark.tmp" 2>/dev/null; mv -f "$mark.tmp" "$mark" && sync "$(dirname "$mark")" 2>/dev/null
  fi
  for d in $dirs; do
    [ -d "$d" ] || continue
    if [ "$age" -ge "$st" ]; then
      setf "$d" 1 2>/dev/null
      for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
      setf "$d" 0 2>/dev/null
    elif ! frozen "$d"; then
      case " $froze " in *" $d "*) ;; *) setf "$d" 1 2>/dev/null && froze="$froze $d";; esac
    fi
  done
  [ "$age" -ge "$st" ] && exit 0
done`;

/** The cgroup directory the watchdog freezes and kills for a server whose cgroup is `cgroup`
 *  (spec.ts cgroupPath: the daemon's own; freezer hierarchy on v1). */
export function fenceCgroup(cgroup: string): string {
  return V2 ? join(ROOT, cgroup) : join(ROOT, 'freezer', cgroup);
}

/** The start time of process `pid` (field 22 of /proc/pid/stat), as the watchdog reads it. */
function startTime(pid: number): string {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return s.slice(s.lastIndexOf(')') + 2).split(' ')[19];
}

export interface FenceWatch {
  /** Rewrites the file: the last contact (wall ms) and the servers that run now. */
  beat(contactAt: number, running: readonly string[]): void;
  /** At the daemon's stop: with servers left running the watchdog stays (the file as last written), else it leaves. */
  stop(leftRunning: boolean): void;
  /** The watchdog's pid (tests). */
  readonly pid: number;
}

/** Starts this daemon's watchdog over `dataDir`'s fence file (a watchdog of an earlier run leaves
 *  once this one's file names another, unless it holds a freeze). `daemonPid`: the process whose
 *  life it watches (this one; tests give another). `settleFile`: where it marks, before it kills,
 *  that the next daemon must read its servers' placements first (registry/fencestate.ts). */
export function startFenceWatch(o: {
  dataDir: string;
  /** A server's cgroup path on this daemon (spec.ts cgroupPath). */
  cgroup: (id: string) => string;
  freezeMs: number;
  stopMs: number;
  everyMs?: number;
  daemonPid?: number;
  settleFile?: string;
}): FenceWatch {
  const file = join(o.dataDir, 'fence-watch');
  const every = Math.max(0.05, Math.min(1, (o.everyMs ?? Math.max(50, Math.floor(o.freezeMs / 10))) / 1000));
  const child = spawn('/bin/sh', ['-c', SCRIPT, 'rootbox-fence-watch', file, String(o.freezeMs), String(o.stopMs), every.toFixed(2), o.settleFile ?? ''], {
    detached: true,
    stdio: 'ignore',
  });
  child.on('error', () => {});
  child.unref();
  const pid = child.pid ?? 0;
  const daemonPid = o.daemonPid ?? process.pid;
  const dstart = startTime(daemonPid);
  const write = (contactAt: number, running: readonly string[]) => {
    const body =
      [`${Math.floor(contactAt)} ${daemonPid} ${dstart} ${pid}`, V2 ? 'v2' : 'v1', ...running.map((id) => fenceCgroup(o.cgroup(id)))].join('\n') + '\n';
    writeFileSync(`${file}.tmp`, body, { mode: 0o600 });
    renameSync(`${file}.tmp`, file);
  };
  return {
    pid,
    beat: (contactAt, running) => {
      try {
        write(contactAt, running);
      } catch {
        // the data dir unwritable a moment: the watchdog counts from the last write, which is safe
      }
    },
    stop: (leftRunning) => {
      if (!leftRunning) rmSync(file, { force: true });
    },
  };
}
