// Init inside every server: tini (the host's static build, bind-mounted read-only at
// /run/rootbox/tini) is PID 1, reaps zombies and forwards signals to the process group of the
// supervisor below. The supervisor is a bash script (bind-mounted read-only beside tini) that:
//   - starts /root/run.sh within ~0.5 s of it existing and being executable, from /root, in a
//     process group of its own;
//   - restarts it when it exits, with backoff 0.5 s doubling to 30 s; the backoff counts only
//     failures of the same run.sh within 10 s of its start, and is forgotten after a run of 10 s;
//   - watches run.sh (content, executable bit, mtime; checked every 0.5 s while it runs, every
//     0.25 s while it waits): a new or changed run.sh ends the waiting at once, and a change while
//     the app runs stops its process group (TERM, KILL after 3 s) and starts the new one, so a
//     fixed run.sh is up within about a second whatever failed before; a removed or no longer
//     executable run.sh stops the app;
//   - starts it again after every container start (it is the container's main process);
//   - appends its stdout/stderr and its own events (`[supervisor <time>] …`: starting, exited
//     with status N — with "(out of memory: …)" when the server's OOM-kill counter in
//     /sys/fs/cgroup grew while it ran —, restarting in N s, run.sh changed) to
//     /var/log/run.sh.log, rotated at 1 MiB (copy-truncate, 2 kept).
// Waiting uses bash's builtin `read -t` on a private pipe and the run.sh checks are builtins
// (`test -nt/-ot` against a reference copy of its mtime, `read` of its content), so a waiting
// supervisor forks nothing; the time in its lines is bash's printf; `touch` and `stat` (rotation)
// run once per start, after run.sh was started (a wake waits for no fork but run.sh's own), and
// `stat` once per 10 s.

import { copyFileSync, existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const INIT_MOUNT = '/run/rootbox';

export const SUPERVISOR = `#!/bin/bash
# rootbox supervisor: keeps /root/run.sh running. Managed by the host; read-only.
LOG=/var/log/run.sh.log
MAX=1048576
RUN=/root/run.sh
REF=/run/rootbox-run.sh.mtime
exec 9<> <(:)
exec </dev/null >/dev/null 2>&1
set -m
pause() { read -t "$1" -u 9 _ || true; }
# the time as date -Is writes it, from bash's own printf (no fork)
say() {
  local now
  printf -v now '%(%Y-%m-%dT%H:%M:%S%z)T' -1
  echo "[supervisor \${now:0:-2}:\${now: -2}] $*" >> "$LOG"
}
rotate() {
  local size
  size=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
  if [ "$size" -gt "$MAX" ]; then
    [ -f "$LOG.1" ] && mv -f "$LOG.1" "$LOG.2"
    cp "$LOG" "$LOG.1" && : > "$LOG"
  fi
}
runnable() { [ -f "$RUN" ] && [ -x "$RUN" ]; }
# true when run.sh is not the one last started: other content, mtime or executable bit
changed() {
  runnable || return 0
  { [ "$RUN" -nt "$REF" ] || [ "$RUN" -ot "$REF" ]; } && return 0
  local body=
  read -r -N 65536 body < "$RUN"
  [ "$body" != "$seen" ]
}
# the server's OOM-kill counter (its memory cgroup, read-only at /sys/fs/cgroup; v1 or v2) into $ooms
oom_count() {
  ooms=0
  local f l
  for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events; do
    [ -r "$f" ] || continue
    while read -r l; do case $l in "oom_kill "*) ooms=\${l#oom_kill } ;; esac; done < "$f"
    return 0
  done
}
child=
seen=
# reaps the app's process if it has exited: bash does not reap while it runs a trap, and kill -0
# finds the group of an unreaped (zombie) app alive
reap_exited() {
  local st=
  read -r st < "/proc/$child/stat" 2>/dev/null || return 0
  st=\${st##*) }
  [ "\${st:0:1}" = Z ] && wait "$child" 2>/dev/null
  return 0
}
stop_child() {
  [ -n "$child" ] || return 0
  kill -TERM -- "-$child" 2>/dev/null
  local i
  for i in {1..30}; do reap_exited; kill -0 -- "-$child" 2>/dev/null || break; pause 0.1; done
  kill -KILL -- "-$child" 2>/dev/null
  wait "$child" 2>/dev/null
  child=
}
trap 'stop_child; exit 0' TERM INT
[ -d /var/log ] || mkdir -p /var/log
backoff=500
fresh=0 # 1: run.sh is new or changed (at a container start it is neither: no delay)
while :; do
  if ! runnable; then
    fresh=1
    pause 0.5
    continue
  fi
  # a new or changed run.sh: let the writer finish before starting it
  [ "$fresh" = 1 ] && pause 0.2
  fresh=0
  runnable || continue
  seen=
  read -r -N 65536 seen < "$RUN"
  oom_count
  ooms_before=$ooms
  say "starting /root/run.sh"
  ( cd /root && exec "$RUN" ) >> "$LOG" 2>&1 &
  child=$!
  started=$SECONDS
  # after the start, off a wake's path (each forks): the mtime reference (a change made in
  # between differs from $seen, which changed() compares too) and the rotation check
  touch -r "$RUN" "$REF" 2>/dev/null
  rotate
  ticks=0
  while kill -0 "$child" 2>/dev/null; do
    pause 0.5
    ticks=$((ticks + 1))
    [ $((ticks % 20)) -eq 0 ] && rotate
    if changed; then
      say "/root/run.sh changed: stopping the running one"
      stop_child
      fresh=1
      backoff=500
      break
    fi
  done
  [ "$fresh" = 1 ] && continue
  wait "$child"
  status=$?
  child=
  oom_count
  if [ "$ooms" -gt "$ooms_before" ] && [ "$status" -gt 128 ]; then
    say "/root/run.sh exited with status $status (out of memory: the kernel killed a process of this server at its memory limit)"
  else
    say "/root/run.sh exited with status $status"
  fi
  if [ $((SECONDS - started)) -ge 10 ]; then backoff=500; fi
  printf -v secs '%d.%d' $((backoff / 1000)) $((backoff % 1000 / 100))
  say "restarting in $secs s"
  for ((t = 0; t < backoff; t += 250)); do
    pause 0.25
    if changed; then
      say "/root/run.sh changed: starting it now"
      fresh=1
      break
    fi
  done
  if [ "$fresh" = 1 ]; then backoff=500; else backoff=$((backoff * 2 > 30000 ? 30000 : backoff * 2)); fi
done
`;

/** Host files bind-mounted at /run/rootbox: returns the directory. Rewrites them atomically. */
export function ensureInitDir(dir: string): string {
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const tini = join(dir, 'tini');
  if (!existsSync(tini)) {
    const src = ['/usr/bin/tini-static', '/usr/bin/tini'].find((p) => existsSync(p));
    if (!src) throw new Error('tini is not installed on the host (apt-get install -y tini)');
    copyFileSync(src, `${tini}.tmp`);
    renameSync(`${tini}.tmp`, tini);
  }
  writeFileSync(join(dir, 'supervisor.tmp'), SUPERVISOR, { mode: 0o755 });
  renameSync(join(dir, 'supervisor.tmp'), join(dir, 'supervisor'));
  return dir;
}

/** argv of the container's PID 1. */
export const INIT_ARGS = [`${INIT_MOUNT}/tini`, '-g', '--', '/bin/bash', `${INIT_MOUNT}/supervisor`];
