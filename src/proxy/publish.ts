// What a server publishes on its subdomain, and whether its app is listening. "Published app" =
// an executable /root/run.sh in the server's root (symlinks resolved inside it), checked on the
// host view of the rootfs and cached for `checkInterval`. Port 80 readiness is learned from
// successful forwards and probed with plain TCP connects (one probe loop per server, shared by
// every waiting request) after a wake, a failure, or when run.sh has just appeared. A thaw keeps
// it: the connection the first request goes over is the check (a refused one marks the app down
// and the request waits for it, as after any failure). A look made once a server dozes that found
// run.sh holds for as long as that doze lasts (lookAtDoze, knownWhileDozing): nothing in a frozen
// server runs to remove it, and the files API wakes a server before it writes. One that found none
// is only the newest answer: run.sh may still come from the host's side, so a request looks again.

import { connect } from 'node:net';
import { walk } from './resolve.js';
import type { Upstream } from './forward.js';

/** Resolves true when something accepts a TCP connection at `up` within `timeoutMs`. */
export function probe(up: Upstream, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: up.host, port: up.port });
    const done = (ok: boolean) => {
      clearTimeout(t);
      s.destroy();
      resolve(ok);
    };
    const t = setTimeout(() => done(false), timeoutMs);
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whether <rootfs>/root/run.sh is an executable file (symlinks resolved inside the rootfs). */
const runShIn = (rootfs: string): Promise<boolean> => walk(rootfs, ['root', 'run.sh']).then((f) => !!f && f.stat.isFile() && (f.stat.mode & 0o111) !== 0);

/** A run.sh look: when it began, its answer (known once complete), the rootfs it looked in, and the
 *  answer of the look made during a doze (lookAtDoze). */
interface Look {
  at: number;
  value: Promise<boolean>;
  known?: boolean;
  rootfs: string;
  dozing?: { doze: number; known: boolean };
}

export class Publication {
  private readonly runSh = new Map<string, Look>();
  private readonly ready = new Set<string>();
  private readonly waits = new Map<string, { until: number; value: Promise<boolean> }>();

  constructor(private readonly opts: { checkInterval: number; now?: () => number }) {}

  private now(): number {
    return this.opts.now ? this.opts.now() : Date.now();
  }

  /** Whether /root/run.sh exists and is executable (cached). */
  hasApp(id: string, rootfs: string): Promise<boolean> {
    const hit = this.runSh.get(id);
    const now = this.now();
    if (hit && now - hit.at < this.opts.checkInterval) return hit.value;
    const entry: Look = { at: now, value: Promise.resolve(false), rootfs, dozing: hit?.dozing };
    entry.value = runShIn(rootfs).then((known) => (entry.known = known));
    // Keep answering from the previous result while the new check runs.
    if (hit?.known !== undefined) entry.known = hit.known;
    this.runSh.set(id, entry);
    if (this.runSh.size > 100_000) this.runSh.clear();
    return entry.value;
  }

  /** Looks again once the server dozes (`doze`: which one, presence dozeOf), for a server looked at
   *  before (its rootfs known): the answer holds while that doze lasts (knownWhileDozing). */
  lookAtDoze(id: string, doze: number): void {
    const rootfs = this.runSh.get(id)?.rootfs;
    if (rootfs === undefined) return;
    runShIn(rootfs).then(
      (known) => {
        const e = this.runSh.get(id);
        if (!e) return;
        e.dozing = { doze, known };
        e.known = known; // the newest completed look (hadApp: whether a wake waits for a look)
      },
      () => {},
    );
  }

  /** Whether run.sh was there when the look made during doze `doze` was (undefined: no such look). */
  knownWhileDozing(id: string, doze: number | undefined): boolean | undefined {
    const d = this.runSh.get(id)?.dozing;
    return d && d.doze === doze ? d.known : undefined;
  }

  /** The server thawed out of doze `doze`: what the look made during it found counts as a look
   *  made now (fresh for checkInterval), so the request after a thaw (a TLS hello's) looks no more. */
  thawed(id: string, doze: number | undefined): void {
    const e = this.runSh.get(id);
    const d = e?.dozing;
    if (!e || !d || d.doze !== doze) return;
    this.runSh.set(id, { at: this.now(), value: Promise.resolve(d.known), known: d.known, rootfs: e.rootfs });
  }

  /** Whether the last completed hasApp check found an app, however old it is. */
  hadApp(id: string): boolean {
    return this.runSh.get(id)?.known === true;
  }

  /** The cached answer of hasApp when it is fresh and known, without waiting (the hot path). */
  knownApp(id: string): boolean | undefined {
    const hit = this.runSh.get(id);
    return hit && this.now() - hit.at < this.opts.checkInterval ? hit.known : undefined;
  }

  isReady(id: string): boolean {
    return this.ready.has(id);
  }

  markReady(id: string): void {
    this.ready.add(id);
  }

  /** The app stopped answering, or the server went to sleep: probe again before the next forward. */
  markDown(id: string): void {
    this.ready.delete(id);
  }

  /**
   * Waits until the app accepts connections or `deadline` (epoch ms) passes. Concurrent callers
   * share one probe loop; a caller with a later deadline extends it.
   */
  waitReady(id: string, up: Upstream, deadline: number): Promise<boolean> {
    if (this.ready.has(id)) return Promise.resolve(true);
    const cur = this.waits.get(id);
    if (cur) {
      cur.until = Math.max(cur.until, deadline);
      return cur.value;
    }
    const entry = { until: deadline, value: Promise.resolve(false) };
    entry.value = (async () => {
      // A refused connect costs microseconds: poll every 1 ms while a woken app is most likely
      // to come up (its first 250 ms: a cold wake's first byte waits for this), every 5 ms for
      // the rest of its first second, then back off.
      const began = this.now();
      while (this.now() < entry.until) {
        const left = entry.until - this.now();
        if (await probe(up, Math.max(1, Math.min(1000, left)))) {
          this.ready.add(id);
          return true;
        }
        const waited = this.now() - began;
        const pause = waited < 250 ? 1 : waited < 1000 ? 5 : waited < 5000 ? 20 : 50;
        await sleep(Math.min(pause, Math.max(0, entry.until - this.now())));
      }
      return this.ready.has(id);
    })().finally(() => {
      if (this.waits.get(id) === entry) this.waits.delete(id);
    });
    this.waits.set(id, entry);
    return entry.value;
  }

  forget(id: string): void {
    this.runSh.delete(id);
    this.ready.delete(id);
  }
}
