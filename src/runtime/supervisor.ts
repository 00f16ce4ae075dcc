// Init inside every server: tini (the host's static build, bind-mounted read-only at
// /run/rootbox/tini) is PID 1, reaps zombies and forwards signals to the process group of the
// supervisor below. The supervisor is a bash script (bind-mounted read-only beside tini) that:
//   - starts /root/run.sh within ~0.5 s of it existing and being executable, from /root;
//   - restarts it when it exits, with backoff 0.5 s doubling to 30 s (reset after 10 s of uptime);
//   - starts it again after every container start (it is the container's main process);
//   - appends its stdout/stderr to /var/log/run.sh.log, rotated at 1 MiB (copy-truncate, 2 kept).
// Waiting uses bash's builtin `read -t` on a private pipe, so an idle server forks nothing.

import { copyFileSync, existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const INIT_MOUNT = '/run/rootbox';

export const SUPERVISOR = `#!/bin/bash
# rootbox supervisor: keeps /root/run.sh running. Managed by the host; read-only.
LOG=/var/log/run.sh.log
MAX=1048576
exec 9<> <(:)
exec </dev/null >/dev/null 2>&1
pause() { read -t "$1" -u 9 _ || true; }
rotate() {
  local size
  size=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
  if [ "$size" -gt "$MAX" ]; then
    [ -f "$LOG.1" ] && mv -f "$LOG.1" "$LOG.2"
    cp "$LOG" "$LOG.1" && : > "$LOG"
  fi
}
child=
trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 0' TERM INT
backoff=0.5
mkdir -p /var/log
while :; do
  if [ -f /root/run.sh ] && [ -x /root/run.sh ]; then
    rotate
    echo "[supervisor $(date -Is)] starting /root/run.sh" >> "$LOG"
    ( cd /root && exec /root/run.sh ) >> "$LOG" 2>&1 &
    child=$!
    started=$SECONDS
    ticks=0
    while kill -0 "$child" 2>/dev/null; do
      pause 0.5
      ticks=$((ticks + 1))
      [ $((ticks % 20)) -eq 0 ] && rotate
    done
    wait "$child"
    status=$?
    child=
    echo "[supervisor $(date -Is)] /root/run.sh exited with status $status" >> "$LOG"
    if [ $((SECONDS - started)) -ge 10 ]; then backoff=0.5; fi
    pause "$backoff"
    case $backoff in 0.5) backoff=1 ;; 1) backoff=2 ;; 2) backoff=4 ;; 4) backoff=8 ;; 8) backoff=16 ;; *) backoff=30 ;; esac
  else
    pause 0.5
  fi
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
