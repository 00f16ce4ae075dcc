// What one daemon holds on the host, read from the host itself (not from the daemon): mounts and
// loop devices under its data dir, veths on its bridge, runc containers under its runc root,
// nft egress elements and counters in its table, cgroups of given server ids, and listeners on
// its exposed-port pool. Tests compare this with what the daemon acknowledged.

import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { run } from '../../helpers/run.js';
import { cgroupsOf, mountsUnder } from './procdaemon.js';

export interface HostScan {
  /** Mount points under the data dir (but its lxcfs and its devices tmpfs, the daemon's own, which
   *  outlive a killed daemon by design: the next start replaces the devices one). */
  mounts: string[];
  /** Loop devices whose backing file lies under the data dir (deleted files included). */
  loops: { name: string; file: string }[];
  /** Interfaces enslaved to the bridge (host sides of veths). */
  veths: string[];
  runc: { id: string; status: string }[];
  /** Addresses in the nft egress map. */
  nftElements: string[];
  /** Named counters in the nft table. */
  nftCounters: string[];
  /** Pool ports in LISTEN state on the host. */
  listening: number[];
  /** Entries of <dataDir>/servers. */
  dirs: string[];
}

const SRV = /srv_[0-9a-f]{6,32}/;

/** The server id a host path under the data dir belongs to. */
export const idOfPath = (p: string): string | undefined => SRV.exec(p)?.[0];

async function json(cmd: string, args: string[]): Promise<any> {
  const r = await run(cmd, args, { timeoutMs: 20_000 });
  if (r.code !== 0 || !r.stdout.trim()) return undefined;
  return JSON.parse(r.stdout);
}

function listeningPorts(first: number, last: number): number[] {
  const out = new Set<number>();
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    if (!existsSync(f)) continue;
    for (const line of readFileSync(f, 'utf8').split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 4 || cols[3] !== '0A') continue;
      const port = parseInt(cols[1].split(':')[1], 16);
      if (port >= first && port <= last) out.add(port);
    }
  }
  return [...out].sort((a, b) => a - b);
}

export async function scanHost(o: { dataDir: string; bridge: string; table: string; pool: [number, number] }): Promise<HostScan> {
  const loops = ((await json('losetup', ['-l', '-J', '-O', 'NAME,BACK-FILE']))?.loopdevices ?? []) as { name: string; 'back-file': string | null }[];
  const links = ((await json('ip', ['-j', 'link', 'show', 'master', o.bridge])) ?? []) as { ifname: string }[];
  const runc = ((await json('runc', ['--root', join(o.dataDir, 'runc'), 'list', '--format', 'json'])) ?? []) as { id: string; status: string }[];
  const map = (await json('nft', ['-j', 'list', 'map', 'inet', o.table, 'egress']))?.nftables ?? [];
  const elems: string[] = [];
  for (const x of map) for (const e of x.map?.elem ?? []) elems.push(typeof e[0] === 'string' ? e[0] : JSON.stringify(e[0]));
  const counters = ((await json('nft', ['-j', 'list', 'counters', 'table', 'inet', o.table]))?.nftables ?? [])
    .filter((x: any) => x.counter)
    .map((x: any) => x.counter.name as string);
  const dir = join(o.dataDir, 'servers');
  return {
    mounts: mountsUnder(o.dataDir).filter((m) => m !== join(o.dataDir, 'lxcfs') && m !== join(o.dataDir, 'devices')), // the daemon's own, no server's
    loops: loops.filter((l) => (l['back-file'] ?? '').startsWith(o.dataDir + '/')).map((l) => ({ name: l.name, file: l['back-file']! })),
    veths: links.map((l) => l.ifname),
    runc: runc.map((c) => ({ id: c.id, status: c.status })),
    nftElements: elems,
    nftCounters: counters,
    listening: listeningPorts(o.pool[0], o.pool[1]),
    dirs: existsSync(dir) ? readdirSync(dir) : [],
  };
}

/** Server ids (of those given) that still have a cgroup directory somewhere. */
export const withCgroups = (table: string, ids: Iterable<string>): string[] => [...ids].filter((id) => cgroupsOf(table, id).length > 0);

/** Every server id a scan mentions (paths, containers). */
export function idsIn(s: HostScan): Set<string> {
  const ids = new Set<string>();
  for (const p of [...s.mounts, ...s.loops.map((l) => l.file), ...s.dirs.map((d) => `/${d}`)]) {
    const id = idOfPath(p);
    if (id) ids.add(id);
  }
  for (const c of s.runc) ids.add(c.id);
  return ids;
}
