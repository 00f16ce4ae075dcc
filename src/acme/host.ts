// The host's own certificate ({domain} and *.{domain}, DNS-01): loaded from the store at start
// (or ordered when there is none), renewed `renewBefore` ahead of expiry with jitter, retried
// with doubling backoff after a failure while the previous certificate keeps being served, and
// swapped into the listeners through the sink (new handshakes get it, open connections keep
// theirs). Its state is written to <dataDir>/acme/state.json for `rootbox doctor` (the daemon
// may be another process) and answered live for `rootbox status`.

import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Logger } from '../log/index.js';
import type { Issued } from './order.js';
import { reason } from './order.js';

export interface HostCertState {
  state: 'pending' | 'issuing' | 'active' | 'failed';
  names: string[];
  not_after: string | null;
  days_left: number | null;
  issued_at: string | null;
  /** The last attempt's outcome; `last_error` stays until an attempt succeeds. */
  last_attempt: string | null;
  last_error: string | null;
  failures: number;
  next_attempt: string | null;
  /** Time the last successful order took, ms. */
  last_issue_ms: number | null;
}

export interface HostCertDeps {
  names: string[];
  renewBeforeMs: number;
  retryAfterMs: number;
  stateFile: string;
  load(): { notAfter: number; issuedAt: number; names: string[] } | undefined;
  /** Orders a certificate (dns-01); throws on failure. */
  order(names: string[]): Promise<Issued>;
  /** Stores and installs an issued certificate. */
  save(issued: Issued): void;
  log: Logger;
}

const MAX_BACKOFF = 12 * 3_600_000;
const MAX_TIMER = 2 ** 31 - 1;
const iso = (t: number | undefined) => (t ? new Date(t).toISOString() : null);

export class HostCertificate {
  private current?: { notAfter: number; issuedAt: number };
  private timer?: NodeJS.Timeout;
  private nextAt?: number;
  private running?: Promise<void>;
  private lastAttempt?: number;
  private lastError?: string;
  private failures = 0;
  private lastMs?: number;
  private stopped = false;
  private busy = false;

  constructor(private readonly d: HostCertDeps) {}

  start(): void {
    const rec = this.d.load();
    const same = rec && rec.names.length === this.d.names.length && this.d.names.every((n) => rec.names.includes(n));
    if (rec && same) {
      this.current = rec;
      this.schedule(this.dueAt(rec.notAfter));
    } else this.schedule(Date.now());
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** Renews now (or joins the attempt under way); resolves when it ended, whatever its outcome. */
  renewNow(): Promise<void> {
    this.running ??= this.attempt().finally(() => (this.running = undefined));
    return this.running;
  }

  private dueAt(notAfter: number): number {
    const jitter = Math.random() * Math.min(this.d.renewBeforeMs / 10, 6 * 3_600_000);
    return notAfter - this.d.renewBeforeMs - jitter;
  }

  private schedule(at: number): void {
    clearTimeout(this.timer);
    if (this.stopped) return;
    this.nextAt = Math.max(at, Date.now());
    this.writeState();
    const fire = () => {
      if (Date.now() >= this.nextAt!) void this.renewNow();
      else this.timer = setTimeout(fire, Math.min(this.nextAt! - Date.now(), MAX_TIMER)).unref();
    };
    this.timer = setTimeout(fire, Math.min(this.nextAt - Date.now(), MAX_TIMER)).unref();
  }

  private async attempt(): Promise<void> {
    const t0 = Date.now();
    this.lastAttempt = t0;
    this.nextAt = undefined;
    this.busy = true;
    this.writeState();
    try {
      const issued = await this.d.order(this.d.names);
      if (this.stopped) return;
      this.d.save(issued);
      this.current = { notAfter: issued.notAfter, issuedAt: Date.now() };
      this.lastMs = Date.now() - t0;
      this.failures = 0;
      this.lastError = undefined;
      this.busy = false;
      this.d.log.info('ACME certificate installed', { names: this.d.names, notAfter: iso(issued.notAfter), ms: this.lastMs });
      this.schedule(this.dueAt(issued.notAfter));
    } catch (e) {
      if (this.stopped) return;
      this.failures++;
      this.lastError = reason(e);
      this.busy = false;
      const wait = Math.min(this.d.retryAfterMs * 2 ** (this.failures - 1), MAX_BACKOFF);
      this.d.log.error(
        this.current ? 'ACME renewal failed; keeping the previous certificate' : 'ACME issuance failed; serving the default certificate meanwhile',
        { names: this.d.names, err: this.lastError, failures: this.failures, retryInMs: wait, notAfter: iso(this.current?.notAfter) },
      );
      this.schedule(Date.now() + wait);
    }
  }

  status(now = Date.now()): HostCertState {
    const c = this.current;
    return {
      state: this.busy ? 'issuing' : this.lastError ? 'failed' : c ? 'active' : 'pending',
      names: this.d.names,
      not_after: iso(c?.notAfter),
      days_left: c ? Math.floor((c.notAfter - now) / 86_400_000) : null,
      issued_at: iso(c?.issuedAt),
      last_attempt: iso(this.lastAttempt),
      last_error: this.lastError ?? null,
      failures: this.failures,
      next_attempt: iso(this.nextAt),
      last_issue_ms: this.lastMs ?? null,
    };
  }

  private writeState(): void {
    try {
      mkdirSync(dirname(this.d.stateFile), { recursive: true, mode: 0o700 });
      const tmp = `${this.d.stateFile}.tmp`;
      writeFileSync(tmp, JSON.stringify({ ...this.status(), written_at: new Date().toISOString() }) + '\n', { mode: 0o600 });
      renameSync(tmp, this.d.stateFile);
    } catch (e) {
      this.d.log.warn('cannot write the ACME state file', { err: (e as Error).message });
    }
  }
}
