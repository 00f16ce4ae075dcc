// Where an operator reads the daemon's log, for the hints the command line prints: journald when
// the daemon runs as the rootbox unit under systemd (`rootbox install` made it), else the output
// of the `rootbox serve` they started themselves.

import { existsSync } from 'node:fs';

const UNIT_FILES = ['/etc/systemd/system/rootbox.service', '/lib/systemd/system/rootbox.service', '/usr/lib/systemd/system/rootbox.service'];

/** Whether the daemon is the rootbox unit of a running systemd. */
export function underSystemd(root = ''): boolean {
  return existsSync(`${root}/run/systemd/system`) && UNIT_FILES.some((f) => existsSync(root + f));
}

/** "journalctl -u rootbox | grep <rid>", or where the log is when no unit runs it. */
export function logWhere(grep?: string, systemd = underSystemd()): string {
  if (systemd) return grep ? `journalctl -u rootbox | grep ${grep}` : 'journalctl -u rootbox';
  return grep ? `the output of rootbox serve, the line with ${grep}` : 'the output of rootbox serve (one JSON object per line)';
}
