// Cluster mode's start without waiting on the registry (issue 36 item 6): the edge and SSH listen
// before any registry round trip completes, and until this host has joined — the registry's answer
// to its start (or its failure to answer), its names reconciled, its channel up — what needs the
// registry answers 503 registry_unavailable with Retry-After instead of waiting a connect timeout:
// the hosting API (but its health check and OpenAPI document), and sites this host does not have.
// main.ts wires these; `joined()` turns true once the joined part ran. A box with records the
// registry does not have yet joins before that: while the registry cannot be reached its join is
// tried again with back-off (joinUntilDone), the host serving its own sites meanwhile, instead of
// failing the start (under systemd: a crash loop for as long as the registry is away).

import type { Duplex } from 'node:stream';
import type { Channel } from './channel/index.js';
import type { Clock } from './clock.js';
import { AppError, isAppError } from './errors.js';
import type { HostingApi } from './hosting/index.js';
import type { HelloApp } from './http/index.js';
import type { Logger } from './log/index.js';
import type { JoinReport, Registry } from './registry/index.js';

/** Seconds a client is told to wait while this host joins. */
const RETRY_S = 1;

const joining = () =>
  AppError.of('registry_unavailable', 'this host is starting and has not heard from the cluster registry yet: try again in a moment', { retryAfter: RETRY_S });

/** Answers without the registry while joining: the health check and the API's description. */
const OPEN = new Set(['/healthz', '/openapi.json']);

/** The hosting API as the edge takes it: 503 with Retry-After while joining (but OPEN). */
export function apiUntilJoined(h: HostingApi, joined: () => boolean): Pick<HostingApi, 'core' | 'handle' | 'upgrade'> {
  return {
    core: h.core,
    handle: (req, res, info) => {
      if (!joined() && !OPEN.has((req.url ?? '/').split('?')[0])) throw joining();
      return h.handle(req, res, info);
    },
    upgrade: (req, socket, head, info) => {
      if (joined()) return h.upgrade(req, socket, head, info);
      refuseUpgrade(socket);
    },
  };
}

function refuseUpgrade(socket: Duplex): void {
  const body = JSON.stringify({ error: 'registry_unavailable', detail: joining().detail, retry_after: RETRY_S });
  socket.end(
    `HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: ${RETRY_S}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/** What the edge serves sites with: the channel's front once there is one, the local proxy until
 *  then — which, while joining in cluster mode, answers 503 for a `<slug>.{domain}` this host does
 *  not have (another host's, which only the registry's placements know). */
export function frontOf(d: {
  proxy: Channel['front'] & Partial<HelloApp>;
  /** The channel once the joined part made it. */
  channel: () => Channel | undefined;
  cluster: boolean;
  domain: string;
  has: (slug: string) => boolean;
  joined: () => boolean;
  /** A request for a server moving off this host waits for this, then goes where the server is (src/moves). */
  hold?: (host: string) => Promise<void> | undefined;
}): Channel['front'] & Partial<HelloApp> {
  const now = () => d.channel()?.front ?? d.proxy;
  const suffix = `.${d.domain}`;
  const elsewhere = (host: string) => {
    if (!d.cluster || d.joined() || !host.endsWith(suffix)) return false;
    const slug = host.slice(0, -suffix.length);
    return !slug.includes('.') && !d.has(slug);
  };
  return {
    handle: (req, res, info) => {
      const held = d.hold?.(info.host);
      if (held) return held.then(() => now().handle(req, res, info));
      if (elsewhere(info.host)) throw joining();
      return now().handle(req, res, info);
    },
    upgrade:
      d.proxy.upgrade &&
      ((req, socket, head, info) => {
        const held = d.hold?.(info.host);
        if (held) return void held.then(() => now().upgrade!(req, socket, head, info));
        if (elsewhere(info.host)) return refuseUpgrade(socket);
        now().upgrade!(req, socket, head, info);
      }),
    // a server moving: node's server answers, which waits (handle)
    lane: d.proxy.lane && ((r, sock, info, done) => (elsewhere(info.host) || d.hold?.(info.host) ? false : (now().lane?.(r, sock, info, done) ?? false))),
    // a TLS hello's server name: this host's proxy thaws a server of its own that dozes (another host's is not in its sites), not one moving
    hello: d.proxy.hello && ((slug) => void (d.hold?.(`${slug}${suffix}`) || d.proxy.hello!(slug))),
  };
}

/** The edge CA as the TLS part sees it, its requests sent once the registry answered this start
 *  (nothing is written under a token it has not checked); nothing awaited at start (the edge
 *  listens first); `settled()` waits for the first request, a second at most. */
export function gatedEdgeCa(r: Registry) {
  let first: Promise<unknown> | undefined;
  const ensure: Registry['edgeCa']['ensure'] = (offer) => {
    const p = r.ready.then(() => r.edgeCa.ensure(offer));
    first ??= p.catch(() => {});
    return p;
  };
  return {
    up: false,
    edgeCa: { ensure },
    settled: () => first && Promise.race([first, new Promise((resolve) => setTimeout(resolve, 1000).unref())]),
  };
}

/** The join's first wait after the registry could not be reached, and its longest (doubling between). */
export const JOIN_RETRY = { firstMs: 1000, maxMs: 30_000 };

/** Runs `join` until it is done, waiting (by `clock`) and trying again while it fails with
 *  registry_unavailable; any other failure (join_conflict, a refusal) is thrown. Answers
 *  undefined when `stopping` is aborted meanwhile (a SIGTERM during the start: not joined). */
export async function joinUntilDone(
  join: () => Promise<JoinReport>,
  o: { clock: Clock; log: Logger; stopping?: AbortSignal },
): Promise<JoinReport | undefined> {
  for (let wait = JOIN_RETRY.firstMs; ; wait = Math.min(JOIN_RETRY.maxMs, wait * 2)) {
    if (o.stopping?.aborted) return undefined;
    try {
      return await join();
    } catch (err) {
      if (!isAppError(err) || err.code !== 'registry_unavailable') throw err;
      o.log.warn('not joined: the registry cannot be reached; this host serves its own sites and tries again', { retryInMs: wait, detail: err.message });
    }
    if (!(await pause(o.clock, wait, o.stopping))) return undefined;
  }
}

/** Waits `ms` by the clock; false when `stopping` is aborted first. */
function pause(clock: Clock, ms: number, stopping?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (v: boolean) => {
      t.cancel();
      stopping?.removeEventListener('abort', aborted);
      resolve(v);
    };
    const aborted = () => done(false);
    const t = clock.after(ms, () => done(true));
    stopping?.addEventListener('abort', aborted, { once: true });
  });
}
