// Signalling the process group of a command started with `runc exec` from inside the server: runc
// forwards a signal only to the top process, and a SIGKILL of runc itself would orphan the
// command. Used by the SSH sessions and the HTTP exec when their client goes away or time is up.

import type { ExecOptions, PipeProcess } from './types.js';

const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Signals the process group of the command whose environment holds `mark` (`NAME=value`). The top
 * process is found as the one that came in from outside the container's pid namespace (ppid 0,
 * not init) carrying the mark; that is the rbx-exec wrapper, whose child (the command) leads its
 * own process group, so the groups of the top's children are signalled (the wrapper reports how
 * its child ended), or the top's own group when it has no child (an unwrapped exec). When the
 * command is already gone, nothing is signalled, so nohup'd work survives.
 */
export function killMarkedCommand(mark: string, signal: 'HUP' | 'TERM' | 'KILL'): ExecOptions {
  const script =
    'm="$1"; sig="$2"; tops=; all=; for d in /proc/[0-9]*; do n=${d#/proc/}; [ "$n" = 1 ] && continue; ' +
    's=$(cat "$d/stat" 2>/dev/null) || continue; s=${s##*) }; set -- $s; all="$all $n:$2"; [ "$2" = 0 ] || continue; ' +
    'if tr "\\0" "\\n" <"$d/environ" 2>/dev/null | grep -qx "$m"; then tops="$tops $n"; fi; done; ' +
    'for t in $tops; do hit=; for e in $all; do [ "${e#*:}" = "$t" ] || continue; c=${e%:*}; hit=1; ' +
    'kill -s "$sig" -- "-$c" 2>/dev/null || kill -s "$sig" "$c" 2>/dev/null; done; ' +
    '[ -n "$hit" ] || kill -s "$sig" -- "-$t" 2>/dev/null || kill -s "$sig" "$t" 2>/dev/null; done; exit 0';
  return { argv: ['/bin/sh', '-c', script, 'rootbox-kill', mark, signal], env: { PATH }, cwd: '/' };
}

/** Runs killMarkedCommand in the server to its end (it is killed itself after 10 s). */
export async function signalMarked(
  rt: { exec(id: string, opts: ExecOptions): PipeProcess },
  id: string,
  mark: string,
  signal: 'HUP' | 'TERM' | 'KILL',
): Promise<void> {
  const k = rt.exec(id, killMarkedCommand(mark, signal));
  k.stdin.end();
  k.stdout.resume();
  k.stderr.resume();
  const t = setTimeout(() => k.kill('SIGKILL'), 10_000);
  try {
    await k.exited;
  } finally {
    clearTimeout(t);
  }
}
