// What a server publishes on its subdomain, and whether its app is listening. "Published app" =
// an executable /root/run.sh in the server's root (symlinks resolved inside it), checked on the
// host view of the rootfs and cached for `checkInterval`. Port 80 readiness is learned from
// successful forwards and probed with plain TCP connects (one probe loop per server, shared by
// every waiting request) after a wake, a failure, or when run.sh has just appeared. A thaw keeps
// it: the connection the first request goes over is the check (a refused one marks the app down
// and the request waits for it, as after any failure).

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

export class Publication {
  private readonly runSh = new Map<string, { at: number; value: Promise<boolean>; known?: boolean }>();
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
    const entry: { at: number; value: Promise<boolean>; known?: boolean } = { at: now, value: Promise.resolve(false) };
    entry.value = walk(rootfs, ['root', 'run.sh']).then((f) => (entry.known = !!f && f.stat.isFile() && (f.stat.mode & 0o111) !== 0));
    // Keep answering from the previous result while the new check runs.
    if (hit?.known !== undefined) entry.known = hit.known;
    this.runSh.set(id, entry);
    if (this.runSh.size > 100_000) this.runSh.clear();
    return entry.value;
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
