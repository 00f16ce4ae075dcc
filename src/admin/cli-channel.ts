// `rootbox cluster status` (issue 29 item 7): every host as the registry has it — its lease, the
// servers placed on it, the capacity its lease reported (room left under the servers' ceilings,
// free memory and disk: hosting/capacity.ts) — and this host's channel to its peers as the running
// daemon knows it (asked over the admin socket: session up or down, since when, errors and the
// last one, requests forwarded by outcome). Without a daemon the registry part still answers.
// A host's state says whether it is dead by cluster.recoverAfter (issue 38: its lease lapsed for
// that long and no peer reported reaching it on the channel for as long), and REACHED when a peer
// last did.

import type { Config } from '../config/index.js';
import type { PeerHealth } from '../channel/index.js';
import { HostDirectory, schemaVersion, verdict, type HostRow, type RegistryPool } from '../registry/index.js';
import { callAdmin } from './client.js';
import { recoveriesOf, recoveryLines } from './cli-recover.js';
import { drainLines } from './cli-drain.js';
import type { CliOut } from './cli-io.js';
import { adminSocketPath } from './server.js';
import { bytes, table } from './table.js';

const at = (iso: string | null | undefined): string => (iso ? iso.slice(0, 19).replace('T', ' ') : '-');

type ChannelView = { running: true; host: string | null; channel: boolean; peers: PeerHealth[] } | { running: false; detail: string };

async function channelOf(dataDir: string): Promise<ChannelView> {
  try {
    const a = await callAdmin(dataDir, 'GET', '/cluster/channel', undefined, 5000);
    if (!a) return { running: false, detail: `no daemon answers on ${adminSocketPath(dataDir)}` };
    if (a.status !== 200) return { running: false, detail: `the daemon answered ${a.status}` };
    return { running: true, ...(a.body as { host: string | null; channel: boolean; peers: PeerHealth[] }) };
  } catch (err) {
    return { running: false, detail: (err as Error).message };
  }
}

/** A host's state by the registry alone (issue 38, deadhost.ts): up (its lease runs), down (lapsed;
 *  when dead: recoverAfter after the lapse, if no peer reached it on the channel since), or dead. */
export function hostState(h: Pick<HostRow, 'up' | 'leaseLeftMs' | 'reachedMs'>, recoverAfterMs: number): string {
  if (h.up) return 'up';
  const v = verdict({ leaseLapsedForMs: -h.leaseLeftMs, silentForMs: h.reachedMs ?? Infinity }, recoverAfterMs);
  if (v.dead) return 'dead';
  if (v.why === 'waiting') return `down (dead in ${Math.ceil(v.inMs! / 1000)} s)`;
  if (v.why === 'channel') return 'down (its peers reach it)';
  return 'down';
}

const reached = (ms: number | null) => (ms === null ? 'never' : `${Math.round(ms / 1000)} s ago`);

function hostLines(hosts: HostRow[], recoverAfterMs: number): string {
  return table(
    ['HOST', 'STATE', 'LEASE', 'SERVERS', 'ADVERTISE', 'PUBLIC IP', 'RAM ROOM', 'DISK ROOM', 'FREE RAM', 'FREE DISK', 'VERSION', 'REACHED'],
    hosts.map((h) => {
      const c = h.capacity;
      return [
        h.name,
        hostState(h, recoverAfterMs) + (h.drain ? ', draining' : ''),
        h.up ? `${(h.leaseLeftMs / 1000).toFixed(1)} s left` : `lapsed ${Math.round(-h.leaseLeftMs / 1000)} s ago`,
        c.serversMax ? `${h.servers} of ${c.serversMax}` : String(h.servers),
        h.advertise,
        h.publicIp,
        bytes(c.memoryRoomBytes),
        bytes(c.diskRoomBytes),
        bytes(c.memoryFreeBytes),
        bytes(c.diskFreeBytes),
        h.version,
        reached(h.reachedMs),
      ];
    }),
  );
}

function channelLines(ch: ChannelView): string {
  if (!ch.running) return `channel: unknown (${ch.detail})`;
  if (!ch.channel) return `channel of ${ch.host ?? 'this host'}: off (no cluster CA in the registry: run rootbox cluster init)`;
  if (!ch.peers.length) return `channel of ${ch.host}: no session to another host yet`;
  const f = (p: PeerHealth) =>
    Object.entries(p.forwarded)
      .filter(([, n]) => n)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ') || '-';
  return [
    `channel of ${ch.host} to its peers:`,
    table(
      ['PEER', 'SESSION', 'SINCE', 'FORWARDED', 'ERRORS', 'LAST ERROR'],
      ch.peers.map((p) => [
        p.peer,
        p.session,
        at(p.session === 'up' ? p.opened_at : (p.closed_at ?? p.last_error?.at)),
        f(p),
        String(p.errors),
        p.last_error ? `${at(p.last_error.at)} ${p.last_error.kind}: ${p.last_error.detail}` : '-',
      ]),
    ),
  ].join('\n');
}

export async function clusterStatus(cfg: Readonly<Config>, pool: RegistryPool, flags: { json?: boolean }, io: CliOut): Promise<number> {
  const schema = await schemaVersion(pool);
  const hosts = schema ? await new HostDirectory(pool, cfg.cluster.lease).list() : [];
  const channel = await channelOf(cfg.dataDir);
  if (flags.json) {
    const recoveries = await recoveriesOf(pool, schema);
    io.out(
      JSON.stringify({ registry: pool.where, schema, hosts: hosts.map((h) => ({ ...h, state: hostState(h, cfg.cluster.recoverAfter) })), channel, recoveries }),
    );
    return 0;
  }
  io.out(`registry ${pool.where}: schema ${schema || 'none (run rootbox cluster init)'}, ${hosts.filter((h) => h.up).length} of ${hosts.length} hosts up`);
  if (hosts.length) io.out(hostLines(hosts, cfg.cluster.recoverAfter));
  for (const l of drainLines(hosts)) io.out(l);
  io.out(channelLines(channel));
  io.out(recoveryLines(await recoveriesOf(pool, schema)));
  return 0;
}
