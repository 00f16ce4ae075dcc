// slug → what the proxy needs to answer for it: the server's id, the host view of its root
// filesystem, where its app listens (container ip, port 80) and its flags. The real
// implementation joins the hosting store's record with the runtime's; tests give their own.

import type { Runtime } from '../runtime/types.js';
import type { ServerRecord } from '../store/index.js';
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
}

export interface Sites {
  lookup(slug: string): Site | undefined;
  /** never_sleep of a server by id (the idle tracker asks at every check). */
  neverSleep(id: string): boolean;
}

export interface ServerLookup {
  bySlug(slug: string): ServerRecord | undefined;
  get(id: string): ServerRecord | undefined;
}

export function storeSites(servers: ServerLookup, runtime: Pick<Runtime, 'get'> | undefined, appPort = 80): Sites {
  return {
    lookup(slug) {
      const rec = servers.bySlug(slug);
      const rt = rec && runtime?.get(rec.id);
      if (!rec || !rt) return undefined;
      return {
        id: rec.id,
        slug: rec.slug,
        rootfs: rt.rootfs,
        upstream: { host: rt.ip, port: appPort },
        neverSleep: rec.neverSleep,
        suspended: rec.suspended,
      };
    },
    neverSleep(id) {
      return servers.get(id)?.neverSleep ?? false;
    },
  };
}
