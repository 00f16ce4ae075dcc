// The DNS questions asked about a customer's domain, behind a small interface: its TXT records,
// its CNAME, its addresses and whether it is a zone apex (then it cannot carry a CNAME). The real
// one asks node's c-ares resolver, at `hosting.domains.resolver` or the system's servers. A name
// without such records is an empty answer; a server that fails or does not answer is an error.

import { Resolver } from 'node:dns/promises';

export interface DnsLookup {
  /** TXT records of the name, each one's strings joined. */
  txt(name: string): Promise<string[]>;
  /** CNAME targets of the name, lowercased, without a trailing dot. */
  cname(name: string): Promise<string[]>;
  /** A and AAAA addresses of the name. */
  addresses(name: string): Promise<string[]>;
  /** True when the name has its own SOA (a zone apex), false when it has none, undefined when DNS did not say. */
  apex(name: string): Promise<boolean | undefined>;
}

/** The name exists without records of that type, or does not exist: an empty answer. */
const EMPTY = new Set(['ENODATA', 'ENOTFOUND', 'NODATA', 'NOTFOUND']);

export class DnsUnavailable extends Error {}

async function answer<T>(q: () => Promise<T[]>): Promise<T[]> {
  try {
    return await q();
  } catch (e) {
    const code = (e as { code?: string }).code ?? '';
    if (EMPTY.has(code)) return [];
    throw new DnsUnavailable(`DNS query failed: ${code || (e as Error).message}`);
  }
}

const bare = (s: string) => s.toLowerCase().replace(/\.$/, '');

/** Asks `server` (`ip` or `ip:port`), or the system's resolvers when it is undefined. */
export function dnsLookup(server?: string, timeoutMs = 3000): DnsLookup {
  const r = new Resolver({ timeout: timeoutMs, tries: 2 });
  if (server) r.setServers([server]);
  return {
    txt: async (name) => (await answer(() => r.resolveTxt(name))).map((parts) => parts.join('')),
    cname: async (name) => (await answer(() => r.resolveCname(name))).map(bare),
    addresses: async (name) => {
      const [v4, v6] = await Promise.all([answer(() => r.resolve4(name)), answer(() => r.resolve6(name))]);
      return [...v4, ...v6];
    },
    apex: async (name) => {
      try {
        await r.resolveSoa(name);
        return true;
      } catch (e) {
        return EMPTY.has((e as { code?: string }).code ?? '') ? false : undefined;
      }
    },
  };
}
