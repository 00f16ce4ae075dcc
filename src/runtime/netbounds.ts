// Per-server bounds on outbound connections, in the `inet <t>` table network.ts sets up:
//   map bounds  { server address : jump nb_<address> }, consulted by the forward chain for every
//               packet from the bridge that would make a new connection-table entry;
//   chain nb_<address>  `limit rate over R/second burst R packets` → counted in nr_<address>, drop;
//               `ct count over N` → counted in nf_<address>, drop.
// A dropped packet's connection-table entry is never confirmed (the kernel frees it at once), so
// a server spraying new flows holds at most N entries of the host's table and the rest of the host
// (other servers, the edge, SSH) keeps its share. The chain is rewritten only when the bounds
// change: its `ct count` keeps its list of the server's open connections across daemon restarts;
// a change (a tier raise) starts that list anew (the old connections age out meanwhile).

import { run, tryRun } from './proc.js';

export interface NetBounds {
  /** Connections the server may have in the host's connection table at once. */
  flows: number;
  /** New connections it may open per second (and as a burst). */
  newFlowsPerSecond: number;
}

export interface FlowDrops {
  /** New connections dropped because the server had `flows` open. */
  flows: number;
  /** New connections dropped for the rate. */
  rate: number;
}

const tag = (ip: string) => ip.replace(/\./g, '_');
export const boundsChain = (ip: string) => `nb_${tag(ip)}`;
const flowCounter = (ip: string) => `nf_${tag(ip)}`;
const rateCounter = (ip: string) => `nr_${tag(ip)}`;
/** Names of the per-server objects of this file (prune removes those of gone servers). */
export const boundsNames = (ip: string) => ({ chain: boundsChain(ip), counters: [flowCounter(ip), rateCounter(ip)] });
export const isBoundsChain = (name: string) => /^nb_\d+_\d+_\d+_\d+$/.test(name);
export const isBoundsCounter = (name: string) => /^n[fr]_\d+_\d+_\d+_\d+$/.test(name);

/** The forward-chain rule and map of the table (network.ts setup). */
export const boundsSetup = (t: string, bridge: string) => [
  `add map inet ${t} bounds { type ipv4_addr : verdict; }`,
  `add rule inet ${t} forward iifname "${bridge}" ct state new ip saddr vmap @bounds`,
];

/** The server's bounds as its chain has them, or undefined when it has no chain (yet). */
export async function appliedBounds(t: string, ip: string): Promise<NetBounds | undefined> {
  const r = await tryRun('nft', ['-j', 'list', 'chain', 'inet', t, boundsChain(ip)]);
  if (!r) return undefined;
  let flows: number | undefined;
  let rate: number | undefined;
  try {
    for (const x of (JSON.parse(r.stdout) as { nftables: { rule?: { expr: Record<string, any>[] } }[] }).nftables) {
      for (const e of x.rule?.expr ?? []) {
        if (e['ct count']) flows = Number(e['ct count'].val);
        if (e.limit) rate = Number(e.limit.rate);
      }
    }
  } catch {
    return undefined;
  }
  return flows && rate ? { flows, newFlowsPerSecond: rate } : undefined;
}

/** Gives the server its counters, chain and map element with `b` (idempotent; the chain's rules
 *  are rewritten only when they differ, keeping its count of open connections otherwise). */
export async function applyBounds(t: string, ip: string, b: NetBounds): Promise<void> {
  const have = await appliedBounds(t, ip);
  const same = have?.flows === b.flows && have.newFlowsPerSecond === b.newFlowsPerSecond;
  const c = boundsChain(ip);
  const lines = [`add counter inet ${t} ${flowCounter(ip)}`, `add counter inet ${t} ${rateCounter(ip)}`, `add chain inet ${t} ${c}`];
  if (!same) {
    const r = Math.max(1, Math.floor(b.newFlowsPerSecond));
    lines.push(
      `flush chain inet ${t} ${c}`,
      `add rule inet ${t} ${c} limit rate over ${r}/second burst ${r} packets counter name "${rateCounter(ip)}" drop`,
      `add rule inet ${t} ${c} ct count over ${Math.floor(b.flows)} counter name "${flowCounter(ip)}" drop`,
    );
  }
  lines.push(`add element inet ${t} bounds { ${ip} : jump ${c} }`);
  await run('nft', ['-f', '-'], { input: lines.join('\n') + '\n' });
}

/** Removes the server's map element, chain and counters (each when present). */
export async function removeBounds(t: string, ip: string): Promise<void> {
  await tryRun('nft', ['delete', 'element', 'inet', t, 'bounds', `{ ${ip} }`]);
  await tryRun('nft', ['delete', 'chain', 'inet', t, boundsChain(ip)]);
  for (const n of boundsNames(ip).counters) await tryRun('nft', ['delete', 'counter', 'inet', t, n]);
}

/** Every server's drop counters, by address, from one listing of the table's counters. */
export async function readDrops(t: string): Promise<Map<string, FlowDrops>> {
  const out = new Map<string, FlowDrops>();
  const r = await tryRun('nft', ['-j', 'list', 'counters', 'table', 'inet', t]);
  if (!r) return out;
  let list: { counter?: { name: string; packets: number } }[] = [];
  try {
    list = (JSON.parse(r.stdout) as { nftables: { counter?: { name: string; packets: number } }[] }).nftables;
  } catch {
    return out;
  }
  for (const x of list) {
    const m = x.counter && /^n([fr])_(\d+)_(\d+)_(\d+)_(\d+)$/.exec(x.counter.name);
    if (!m) continue;
    const ip = m.slice(2).join('.');
    const d = out.get(ip) ?? { flows: 0, rate: 0 };
    d[m[1] === 'f' ? 'flows' : 'rate'] = Number(x.counter!.packets) || 0;
    out.set(ip, d);
  }
  return out;
}
