// The ports `rootbox install` writes into the config: HTTP, HTTPS and SSH. A flag wins; then what an
// earlier install (or the operator) put in the config; else the production port (80, 443, 22) when
// nothing listens on it, else the development one (8080, 8443, 2222) with a sentence saying which
// port was taken, by what, and the flag that chooses another. A port neither free nor given is
// refused, naming the flag. "Taken" means a TCP socket in LISTEN on that port, on any address, in
// /proc/net/tcp or tcp6 (a listener on one address keeps the daemon's 0.0.0.0 from binding it).

import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { basename } from 'node:path';
import { AppError } from '../errors.js';

export type Listener = 'http' | 'https' | 'ssh';

const WANTED: Record<Listener, { port: number; fallback: number; flag: string; why: string }> = {
  http: { port: 80, fallback: 8080, flag: '--http-port', why: "custom domains' HTTP-01 certificates and the redirect to HTTPS need port 80" },
  https: { port: 443, fallback: 8443, flag: '--https-port', why: 'clients reach https://<slug>.<domain> without a port only on 443' },
  ssh: {
    port: 22,
    fallback: 2222,
    flag: '--ssh-port',
    why: "users then need 'ssh -p 2222'; or move the host's OpenSSH to another port and install again with --ssh-port 22",
  },
};

/** Ports with a TCP socket in LISTEN (IPv4 and IPv6), each with the inode of its socket. */
export function listeningPorts(files = ['/proc/net/tcp', '/proc/net/tcp6']): Map<number, string> {
  const ports = new Map<number, string>();
  for (const f of files) {
    let text = '';
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue; // no IPv6 on this host
    }
    for (const line of text.split('\n').slice(1)) {
      const col = line.trim().split(/\s+/);
      if (col[3] !== '0A') continue; // TCP_LISTEN
      ports.set(parseInt(col[1].split(':')[1], 16), col[9]);
    }
  }
  return ports;
}

/** The program holding the socket `inode` ("sshd": its executable's name), when /proc shows it. */
function holder(inode: string | undefined): string | undefined {
  if (!inode) return undefined;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      for (const fd of readdirSync(`/proc/${pid}/fd`))
        if (readlinkSync(`/proc/${pid}/fd/${fd}`) === `socket:[${inode}]`) return basename(readlinkSync(`/proc/${pid}/exe`));
    } catch {
      // the process ended meanwhile, or its fds are not ours to read
    }
  }
  return undefined;
}

export interface PortChoice {
  ports: Record<Listener, number>;
  /** What was chosen other than asked or usual, one sentence each. */
  notes: string[];
}

/**
 * `given`: the flags; `kept`: the ports of an existing config; `listening`: listeningPorts();
 * `wanted` replaces the production/development pair (tests bind their own).
 */
export function choosePorts(
  given: Partial<Record<Listener, number>>,
  kept: Partial<Record<Listener, number>>,
  listening: Map<number, string>,
  wanted: Partial<Record<Listener, { port: number; fallback: number }>> = {},
): PortChoice {
  const notes: string[] = [];
  const by = (port: number) => {
    const who = holder(listening.get(port));
    return who ? ` (by ${who})` : '';
  };
  const pick = (l: Listener): number => {
    const w = { ...WANTED[l], ...wanted[l] };
    const chosen = given[l] ?? kept[l];
    if (chosen !== undefined) {
      if (given[l] !== undefined && listening.has(chosen))
        notes.push(`${l} port ${chosen} is in use now${by(chosen)}: rootbox cannot listen there until it is free`);
      return chosen;
    }
    if (!listening.has(w.port)) return w.port;
    if (listening.has(w.fallback))
      throw AppError.of(
        'install_failed',
        `${l} ports ${w.port}${by(w.port)} and ${w.fallback}${by(w.fallback)} are both taken; choose one with ${w.flag} PORT`,
      );
    notes.push(`${l} port ${w.port} is taken${by(w.port)}: rootbox ${l} listens on ${w.fallback} (${w.why}; ${w.flag} chooses)`);
    return w.fallback;
  };
  const ports = { http: pick('http'), https: pick('https'), ssh: pick('ssh') };
  const same = Object.entries(ports).filter(([, p], i, all) => p !== 0 && all.findIndex(([, q]) => q === p) !== i);
  if (same.length)
    throw AppError.of('install_failed', `two listeners would share port ${same[0][1]}; give each its own with --http-port, --https-port, --ssh-port`);
  return { ports, notes };
}
