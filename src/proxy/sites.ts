// slug → what the proxy needs to answer for it: the server's id, the host view of its root
// filesystem, where its app listens (container ip, port 80) and its flags. The real
// implementation joins the hosting store's record with the runtime's and keeps the answer (a
// store read and decode cost 0.15-0.3 ms after an idle pause, more than the rest of a dozing
// server's lookup): for as long as no server record was written since (the store's version),
// else for a second; a deleted server is forgotten at once. Tests give their own.

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
  /** Changes with every write to a server record; without it, a lookup is kept for ttlMs. */
  version?(): number;
}

const MAX_REMEMBERED = 10_000;

export function storeSites(servers: ServerLookup, runtime: Pick<Runtime, 'get'> | undefined, opts: { ttlMs?: number; now?: () => number } = {}): Sites {
  const ttl = opts.ttlMs ?? 1000;
  const now = opts.now ?? Date.now;
  const remembered = new Map<string, { site: Site; at: number; version: number | undefined }>();
  /** A remembered lookup still holds: no record written since (or, unversioned, younger than
   *  the ttl), and the runtime still has the server where it was. */
  const holds = (hit: { site: Site; at: number; version: number | undefined }, t: number) => {
    if (hit.version !== undefined ? hit.version !== servers.version?.() : t - hit.at >= ttl) return false;
    const rt = runtime?.get(hit.site.id);
    return rt !== undefined && rt.ip === hit.site.upstream.host && rt.rootfs === hit.site.rootfs;
  };
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
      if (hit && holds(hit, t)) return hit.site;
      const version = servers.version?.();
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
      remembered.set(slug, { site: kept, at: t, version });
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
