// `rootbox cluster status` (issue 29 item 7): every host as the registry has it — its lease, the
// servers placed on it, the capacity its lease reported (room left under the servers' ceilings,
// free memory and disk: hosting/capacity.ts) — and this host's channel to its peers as the running
// daemon knows it (asked over the admin socket: session up or down, since when, errors and the
// last one, requests forwarded by outcome). Without a daemon the registry part still answers.

import type { Config } from '../config/index.js';
import type { PeerHealth } from '../channel/index.js';
import { HostDirectory, schemaVersion, type HostRow, type RegistryPool } from '../registry/index.js';
import { callAdmin } from './client.js';
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

function hostLines(hosts: HostRow[]): string {
  return table(
    ['HOST', 'STATE', 'LEASE', 'SERVERS', 'ADVERTISE', 'PUBLIC IP', 'RAM ROOM', 'DISK ROOM', 'FREE RAM', 'FREE DISK', 'VERSION'],
    hosts.map((h) => {
      const c = h.capacity;
      return [
        h.name,
        (h.up ? 'up' : 'down') + (h.drain ? ', draining' : ''),
        h.up ? `${(h.leaseLeftMs / 1000).toFixed(1)} s left` : `lapsed ${Math.round(-h.leaseLeftMs / 1000)} s ago`,
        c.serversMax ? `${h.servers} of ${c.serversMax}` : String(h.servers),
        h.advertise,
        h.publicIp,
        bytes(c.memoryRoomBytes),
        bytes(c.diskRoomBytes),
        bytes(c.memoryFreeBytes),
        bytes(c.diskFreeBytes),
        h.version,
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
    io.out(JSON.stringify({ registry: pool.where, schema, hosts, channel }));
    return 0;
  }
  io.out(`registry ${pool.where}: schema ${schema || 'none (run rootbox cluster init)'}, ${hosts.filter((h) => h.up).length} of ${hosts.length} hosts up`);
  if (hosts.length) io.out(hostLines(hosts));
  for (const l of drainLines(hosts)) io.out(l);
  io.out(channelLines(channel));
  return 0;
}
