// The client side of the channel: one HTTP/2 session per peer host (its advertise address from the
// registry), kept alive and shared by every request forwarded there. A session is opened on first
// use (sender-connect.ts: this host's certificate, only the host it meant, ready once the owner
// took it and its key is the one the owner's host registered, within connectTimeout) and is dropped
// when it closes, fails or stops answering pings; the next request opens a new one. Sessions are
// pinged every connectTimeout (at most 5 s), each ping answered within connectTimeout, so a peer
// cut off (a partition that drops packets) fails its requests within twice that. After a peer could
// not be reached, requests for it fail at once for connectTimeout (not each waiting connectTimeout
// again); the first one after that tries anew. A peer that refused this host (closed the connection
// right after the handshake, or presented another key) is tried again only after a back-off that
// doubles with each refusal in a row, up to REFUSED_MAX_MS. Whether a peer answers now
// (`answering`: an open session that answered its connect or last ping recently) is what keeps a
// host whose lease ran out (cut off from the registry alone) a host requests are forwarded to.
// Beside each ping (and at each connect) the peer is asked when it last reached the registry
// having heard this host (wire.ts CONTACT_ASK): `registryAgo`, which the self-fence counts as
// this host's own contact (registry/deadhost.ts).
// Beside each open session, the raw lane's connection to the same peer (sender-rawpool.ts: lane
// requests as multiplexed streams), living and dying with the session (whose pings find a dead peer
// out).

import { constants, type ClientHttp2Session } from 'node:http2';
import { systemClock, type Clock, type Timer } from '../clock.js';
import { HttpDate } from '../h1/index.js';
import type { Logger } from '../log/index.js';
import type { ChannelHealth } from './sender-health.js';
import type { Identity } from './identity.js';
import { connectPeer, PeerError, type PeerCheck } from './sender-connect.js';
import { RawPool } from './sender-rawpool.js';
import { CONTACT_ASK, REGISTRY_AGO } from './wire.js';

export { PeerError, type PeerCheck } from './sender-connect.js';

/** The longest wait before a peer that keeps refusing this host is tried again. */
export const REFUSED_MAX_MS = 30_000;

const PING_MS = 5_000;
/** Raw lane requests at once to one peer (beyond them a lane request takes the HTTP/2 session), and how long its idle connection is kept. */
const RAW_MAX = 1024;
const RAW_IDLE_MS = 30_000;

export class Peers {
  private readonly sessions = new Map<string, Promise<ClientHttp2Session>>();
  /** The sessions already connected (whether a peer answers now: `answering`, `openNow`). */
  private readonly ready = new Map<string, ClientHttp2Session>();
  /** The raw lane's pools, by the same key as the sessions they live beside. */
  private readonly raws = new Map<string, RawPool>();
  /** The Date value of the answers the raw lane writes. */
  readonly date = new HttpDate();
  private readonly timer: Timer;
  private readonly clock: Clock;
  /** Peers that could not be reached, until when their requests fail at once (monotonic ms). */
  private readonly failed = new Map<string, { until: number; error: PeerError }>();
  /** Refusals in a row by each peer (its back-off doubles with each). */
  private readonly refusals = new Map<string, number>();
  /** When each open session last answered (its connect, a ping), monotonic ms. */
  private readonly heard = new Map<string, number>();
  /** Each open session's last answer to CONTACT_ASK: when it came and how long before it the peer had reached the registry. */
  private readonly vouched = new Map<string, { at: number; ago: number }>();
  private readonly every: number;
  private readonly now: () => number;

  constructor(
    private readonly o: {
      /** This host's certificate; undefined while the channel is not up (no peer is reached). */
      identity: () => Identity | undefined;
      connectTimeoutMs: number;
      log: Logger;
      health?: ChannelHealth;
      /** Monotonic ms, for when a peer last answered (tests move it). */
      now?: () => number;
      /** The pings' and the raw pools' timers (tests move it). */
      clock?: Clock;
      /** Whether a peer's certificate carries the key its host registered (none: any certificate of the cluster CA naming it). */
      admit?: PeerCheck;
    },
  ) {
    this.clock = o.clock ?? systemClock;
    this.now = o.now ?? (() => performance.now());
    this.every = Math.min(PING_MS, o.connectTimeoutMs);
    // a peer that stopped answering (frozen, cut off) is found out by its pings, not by a request hanging on it
    this.timer = this.clock.every(this.every, () => void this.ping());
  }

  /** Whether `host` at `advertise` answers on the channel now: a session is open and answered its
   *  connect or a ping within two ping intervals and a ping's deadline. */
  answering(host: string, advertise: string): boolean {
    const key = `${host}@${advertise}`;
    const heard = this.heard.get(key);
    return heard !== undefined && this.openNow(host, advertise) !== undefined && this.now() - heard <= 2 * this.every + this.o.connectTimeoutMs;
  }

  /** How long ago `host`, answering now, last reached the registry having heard this host (its
   *  answer to the ask sent beside each ping, aged since); undefined: it has not, or its answer
   *  is not in yet. */
  registryAgo(host: string, advertise: string): number | undefined {
    if (!this.answering(host, advertise)) return undefined;
    const v = this.vouched.get(`${host}@${advertise}`);
    return v && v.ago >= 0 ? v.ago + Math.max(0, this.now() - v.at) : undefined;
  }

  /** Asks the peer of `s` when it last reached the registry having heard this host (wire.ts CONTACT_ASK). */
  private askContact(key: string, s: ClientHttp2Session): void {
    try {
      const req = s.request({ ':method': 'GET', ':path': '/', [CONTACT_ASK]: '1' }, { endStream: true });
      req.on('error', () => {});
      req.setTimeout(this.o.connectTimeoutMs, () => req.close(CANCEL));
      req.on('response', (h) => {
        const ago = Number(h[REGISTRY_AGO]);
        if (this.ready.get(key) === s) this.vouched.set(key, { at: this.now(), ago: Number.isFinite(ago) ? ago : -1 });
        req.close();
      });
      req.resume();
    } catch {
      // a session closing: its close event ends it
    }
  }

  /** Opens a session to `host` in the background, unless one is open or opening or it failed a
   *  moment ago: a host whose lease ran out is forwarded to again once its channel answers. */
  probe(host: string, advertise: string): void {
    this.session(host, advertise).catch(() => {});
  }

  /** The session to `host` at `advertise`, opened now when there is none. */
  session(host: string, advertise: string): Promise<ClientHttp2Session> {
    const key = `${host}@${advertise}`;
    let s = this.sessions.get(key);
    if (!s) {
      const f = this.failed.get(key);
      if (f && this.now() < f.until) return Promise.reject(f.error);
      s = this.open(host, advertise, key);
      this.sessions.set(key, s);
      s.then(
        () => (this.failed.delete(key), this.refusals.delete(key)),
        (e: PeerError) => {
          this.sessions.delete(key);
          if (e.loop) return;
          const n = e.refused ? (this.refusals.get(key) ?? 0) + 1 : 0;
          if (n) this.refusals.set(key, n);
          const wait = n ? Math.min(REFUSED_MAX_MS, this.o.connectTimeoutMs * 2 ** (n - 1)) : this.o.connectTimeoutMs;
          this.failed.set(key, { until: this.now() + wait, error: e });
        },
      );
    }
    return s;
  }

  /** The session to `host` at `advertise` when one is connected and usable now; undefined otherwise. */
  openNow(host: string, advertise: string): ClientHttp2Session | undefined {
    const s = this.ready.get(`${host}@${advertise}`);
    return s && !s.closed && !s.destroyed ? s : undefined;
  }

  /** The raw lane's pool to `host` at `advertise`, while a session to it is open. */
  raw(host: string, advertise: string): RawPool | undefined {
    const key = `${host}@${advertise}`;
    let pool = this.raws.get(key);
    if (pool) return pool;
    if (!this.openNow(host, advertise)) return undefined;
    pool = new RawPool({
      host,
      advertise,
      identity: () => this.o.identity()!, // a session is open: so is the identity
      max: RAW_MAX,
      connectTimeoutMs: this.o.connectTimeoutMs,
      idleMs: RAW_IDLE_MS,
      clock: this.clock,
    });
    this.raws.set(key, pool);
    return pool;
  }

  /** The raw pool beside a session that ended: answers under way finish unless `cut`. */
  private dropRaw(key: string, cut: boolean): void {
    this.raws.get(key)?.close(cut);
    this.raws.delete(key);
  }

  private open(host: string, advertise: string, key: string): Promise<ClientHttp2Session> {
    return connectPeer(this.o, host, advertise, {
      ready: (session) => {
        this.ready.set(key, session);
        this.heard.set(key, this.now());
        this.vouched.delete(key);
        this.askContact(key, session);
      },
      closed: (session) => {
        if (this.ready.get(key) === session) {
          this.ready.delete(key);
          this.heard.delete(key);
          this.vouched.delete(key);
          this.dropRaw(key, false);
        }
        void this.sessions.get(key)?.then(
          (x) => x === session && this.sessions.delete(key),
          () => {},
        );
      },
    });
  }

  /** Pings every connected session (one still connecting is not waited for: its connect has a deadline of its own). */
  private ping(): void {
    for (const [key, s] of this.ready) {
      if (s.destroyed) continue;
      const t = this.clock.after(this.o.connectTimeoutMs, () => {
        this.sessions.delete(key);
        this.ready.delete(key);
        this.heard.delete(key);
        this.vouched.delete(key);
        this.o.health?.error(key.slice(0, key.indexOf('@')), 'ping', 'the peer did not answer a ping');
        // as after a failed connect: for one connect timeout its requests fail at once instead of
        // each waiting for a connection that a peer which stopped answering will not take
        this.failed.set(key, { until: this.now() + this.o.connectTimeoutMs, error: new PeerError(false, 'the peer did not answer a ping') });
        this.dropRaw(key, true);
        s.destroy(new Error('the peer did not answer a ping'));
      });
      try {
        s.ping((err) => {
          t.cancel();
          if (!err && this.ready.get(key) === s) this.heard.set(key, this.now());
          else if (!s.destroyed) s.destroy();
        });
        this.askContact(key, s);
      } catch {
        t.cancel(); // a session closing: its close event ends it
      }
    }
  }

  close(): void {
    this.timer.cancel();
    for (const p of this.sessions.values())
      void p.then(
        (s) => s.close(),
        () => {},
      );
    this.sessions.clear();
    this.ready.clear();
    this.heard.clear();
    this.vouched.clear();
    this.failed.clear();
    for (const key of [...this.raws.keys()]) this.dropRaw(key, true);
  }
}

export const CANCEL = constants.NGHTTP2_CANCEL;
