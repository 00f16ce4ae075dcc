// slug → what the proxy needs to answer for it: the server's id, the host view of its root
// filesystem, where its app listens (container ip, port 80) and its flags. The real
// implementation joins the hosting store's record with the runtime's and keeps the answer for a
// second (a store read and decode per request cost more than the rest of the lookup); a deleted
// server is forgotten at once. Tests give their own.

import type { Runtime } from '../runtime/index.js';
import type { ServerRecord } from '../store/index.js';
import { OPERATOR_SUSPENDED } from '../billing/index.js';
import type { Upstream } from './forward.js';

export interface Site {
  id: string;
  slug: string;
  /** Host path of the server's root filesystem (mounted while the server exists, asleep too). */
  rootfs: string;
  /** Where the server's own app listens: <container ip>:80. */
  upstream: Upstream;
  neverSleep: boolean;
  suspended: boolean;
  /** Suspended by the host's operator (not for want of credit): its page says so. */
  suspendedByOperator?: boolean;
}

export interface Sites {
  lookup(slug: string): Site | undefined;
  /** never_sleep of a server by id (the idle tracker asks at every check). */
  neverSleep(id: string): boolean;
  /** Drops what is remembered of a deleted server. */
  forget?(id: string): void;
}

export interface ServerLookup {
  bySlug(slug: string): ServerRecord | undefined;
  get(id: string): ServerRecord | undefined;
}

const MAX_REMEMBERED = 10_000;

export function storeSites(servers: ServerLookup, runtime: Pick<Runtime, 'get'> | undefined, opts: { ttlMs?: number; now?: () => number } = {}): Sites {
  const ttl = opts.ttlMs ?? 1000;
  const now = opts.now ?? Date.now;
  const remembered = new Map<string, { site: Site; at: number }>();
  const read = (slug: string): Site | undefined => {
    const rec = servers.bySlug(slug);
    const rt = rec && runtime?.get(rec.id);
    if (!rec || !rt) return undefined;
    const suspendedByOperator = rec.suspended && rec.flag === OPERATOR_SUSPENDED;
    return {
      id: rec.id,
      slug: rec.slug,
      rootfs: rt.rootfs,
      upstream: { host: rt.ip, port: 80 },
      neverSleep: rec.neverSleep,
      suspended: rec.suspended,
      suspendedByOperator,
    };
  };
  return {
    lookup(slug) {
      const t = now();
      const hit = remembered.get(slug);
      if (hit && t - hit.at < ttl) return hit.site;
      const site = read(slug);
      if (!site) {
        remembered.delete(slug);
        return undefined;
      }
      // the same object while unchanged, so the upstream pool keeps its identity
      const same = hit && hit.site.id === site.id && hit.site.upstream.host === site.upstream.host && hit.site.rootfs === site.rootfs;
      const kept = same
        ? Object.assign(hit.site, { neverSleep: site.neverSleep, suspended: site.suspended, suspendedByOperator: site.suspendedByOperator })
        : site;
      if (remembered.size >= MAX_REMEMBERED) remembered.clear();
      remembered.set(slug, { site: kept, at: t });
      return kept;
    },
    forget(id) {
      for (const [slug, e] of remembered) if (e.site.id === id) remembered.delete(slug);
    },
    neverSleep(id) {
      return servers.get(id)?.neverSleep ?? false;
    },
  };
}
