// Waiting for a TXT record on the zone's authoritative servers: find the zone (the nearest
// ancestor of the name with NS records, asked of the configured resolver or the system's), find
// its NS hosts' addresses, then ask each of them directly (no cache on the way) until every one
// answers the value, or the deadline passes.

import { Resolver } from 'node:dns/promises';

export interface PropagationSettings {
  /** DNS server (host or host:port) used to find the zone and its NS addresses; undefined = the system's. */
  resolver?: string;
  timeoutMs: number;
  intervalMs?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms).unref());

function resolverOf(server?: string): Resolver {
  const r = new Resolver({ timeout: 2000, tries: 2 });
  if (server) r.setServers([server]);
  return r;
}

/** The zone's authoritative addresses: NS of the nearest ancestor that has them, then A/AAAA. */
export async function authoritative(domain: string, resolver?: string): Promise<{ zone: string; addrs: string[] }> {
  const r = resolverOf(resolver);
  const labels = domain.replace(/\.$/, '').split('.');
  for (let i = 0; i < labels.length - 1 || i === 0; i++) {
    const zone = labels.slice(i).join('.');
    const ns = await r.resolveNs(zone).catch(() => [] as string[]);
    if (!ns.length) continue;
    const addrs = new Set<string>();
    for (const host of ns) {
      for (const a of await r.resolve4(host).catch(() => [] as string[])) addrs.add(a);
      for (const a of await r.resolve6(host).catch(() => [] as string[])) addrs.add(a);
    }
    if (addrs.size) return { zone, addrs: [...addrs] };
  }
  throw new Error(`cannot find the authoritative DNS servers of ${domain}`);
}

async function answers(addr: string, name: string): Promise<string[]> {
  const r = resolverOf(addr);
  return (await r.resolveTxt(name).catch(() => [] as string[][])).map((chunks) => chunks.join(''));
}

export async function waitForTxt(name: string, value: string, domain: string, s: PropagationSettings): Promise<{ servers: number; ms: number }> {
  const t0 = Date.now();
  const { addrs } = await authoritative(domain, s.resolver);
  const pending = new Set(addrs);
  for (;;) {
    for (const a of [...pending]) if ((await answers(a, name)).includes(value)) pending.delete(a);
    if (!pending.size) return { servers: addrs.length, ms: Date.now() - t0 };
    if (Date.now() - t0 > s.timeoutMs) throw new Error(`the TXT record ${name} did not appear on ${[...pending].join(', ')} within ${s.timeoutMs} ms`);
    await sleep(s.intervalMs ?? 1000);
  }
}
