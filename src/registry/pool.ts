// The connection to the cluster registry: a small pg Pool with a connect and a statement
// deadline, every failure to reach it (refused, reset, timed out, the server shutting down, in
// recovery or read-only) told as the stable 503 registry_unavailable, and the URL's password
// never in a message or a log line.
//
// Failover: the URL may name several hosts as libpq does (postgres://u:p@db1:5432,db2:5432/db):
// the primary and its standbys. Node's pg does not do multi-host itself, so the pool does what
// libpq does with target_session_attrs=read-write: before its first statement it asks the hosts
// and uses the one that takes writes (so a one-shot CLI command after a failover reaches the
// promoted standby even with the dead primary first in the URL). It asks them all at once, not
// one after the other: a dead primary that does not answer costs no connect timeout. The URL's own
// target_session_attrs is honoured (any, read-write, primary, read-only, standby,
// prefer-standby); without one a multi-host URL means read-write (the registry is written).
// After a failure to reach the one in use, the pool looks again, the next hosts first, and uses
// the one it finds from the next statement on. The failed statement itself is not repeated (it
// may have committed): its caller gets 503 and tries again, and a lock or claim committed before
// the failover is on the promoted standby (synchronous replication), so a replay is still refused.

import pg from 'pg';
import { AppError } from '../errors.js';

/** The URL with its password (and any secret-looking parameter) replaced, for logs and status lines. */
export function redactUrl(url: string): string {
  const m = /^(postgres(?:ql)?:\/\/)([^/?#]*@)?([^/?#]*)(.*)$/.exec(url);
  if (!m) return 'postgres://(unparsable URL)';
  const auth = m[2] ? m[2].replace(/^([^:@]*):[^@]*@$/, '$1:***@') : '';
  const rest = m[4].replace(/([?&][^=&#]*(?:pass|secret|key)[^=&#]*=)[^&#]*/gi, '$1***');
  return `${m[1]}${auth}${m[3]}${rest}`;
}

/** One URL per host of a libpq-style multi-host URL (a single-host URL is itself). */
export function splitHosts(url: string): string[] {
  const m = /^(postgres(?:ql)?:\/\/)([^/?#]*@)?([^/?#]*)(.*)$/.exec(url);
  if (!m || !m[3].includes(',')) return [url];
  return m[3].split(',').map((h) => `${m[1]}${m[2] ?? ''}${h}${m[4]}`);
}

export type SessionAttrs = 'any' | 'read-write' | 'primary' | 'read-only' | 'standby' | 'prefer-standby';
const ATTRS: readonly SessionAttrs[] = ['any', 'read-write', 'primary', 'read-only', 'standby', 'prefer-standby'];

/** The URL's target_session_attrs (read-write when absent) and the URL without it (node's pg
 *  does not know the parameter). An unknown value is refused, as libpq refuses it. */
export function sessionAttrs(url: string): { attrs: SessionAttrs; url: string } {
  const m = /^([^?#]*)\?([^#]*)(.*)$/.exec(url);
  if (!m) return { attrs: 'read-write', url };
  let attrs: SessionAttrs = 'read-write';
  const kept = m[2].split('&').filter((kv) => {
    const [k, v = ''] = kv.split('=');
    if (k !== 'target_session_attrs') return kv !== '';
    const value = decodeURIComponent(v) as SessionAttrs;
    if (!ATTRS.includes(value)) throw AppError.of('config_invalid', `target_session_attrs=${value} in the registry URL is not one of ${ATTRS.join(', ')}`);
    attrs = value;
    return false;
  });
  return { attrs, url: `${m[1]}${kept.length ? '?' + kept.join('&') : ''}${m[3]}` };
}

/** Whether a host in this state is one the attributes accept (prefer-standby: see findPrimary). */
function fits(attrs: SessionAttrs, s: { standby: boolean; readOnly: boolean }): boolean {
  if (attrs === 'any') return true;
  if (attrs === 'read-write') return !s.readOnly;
  if (attrs === 'primary') return !s.standby;
  if (attrs === 'read-only') return s.readOnly;
  return s.standby;
}

/** SQLSTATE classes that mean "the registry is not usable now", not "the statement is wrong":
 *  connection (08), resources (53), shutdown/crash (57P), system (58), read-only (25006). */
const UNAVAILABLE_STATES = /^(08|53|57P|58|25006)/;
const NETWORK = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE']);

export function isUnavailable(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (typeof e?.code === 'string' && (NETWORK.has(e.code) || UNAVAILABLE_STATES.test(e.code))) return true;
  return /timeout|terminat|Connection (ended|closed)|not queryable|read-only|read only/i.test(String(e?.message ?? ''));
}

export interface PoolOptions {
  url: string;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  /** Connections kept at most (the registry is shared by every host). */
  max?: number;
  application?: string;
}

export class RegistryPool {
  readonly where: string;
  private readonly targets: string[];
  private readonly attrs: SessionAttrs;
  private current = 0;
  private pool: pg.Pool;
  private looking?: Promise<void>;
  /** Whether the hosts were asked yet (a multi-host URL: before the first statement). */
  private found: boolean;
  /** Connections asking hosts now (a dead host's until its connect timeout): ended by end(). */
  private readonly asking = new Set<pg.Client>();

  constructor(private readonly o: PoolOptions) {
    this.where = redactUrl(o.url);
    const { attrs, url } = sessionAttrs(o.url);
    this.attrs = attrs;
    this.targets = splitHosts(url);
    this.found = this.targets.length === 1;
    this.pool = this.open(this.targets[0]);
  }

  /** Resolves once the host to use is known: for a multi-host URL the first search (the hosts in
   *  order, as libpq) has run; after a failure, the search under way has ended. */
  ready(): Promise<void> {
    if (!this.found) {
      this.found = true;
      this.looking ??= this.findPrimary(0).finally(() => (this.looking = undefined));
    }
    return this.looking ?? Promise.resolve();
  }

  private open(url: string): pg.Pool {
    const pool = new pg.Pool({
      connectionString: url,
      max: this.o.max ?? 8,
      connectionTimeoutMillis: this.o.connectTimeoutMs,
      statement_timeout: this.o.statementTimeoutMs,
      query_timeout: this.o.statementTimeoutMs + 1000,
      idleTimeoutMillis: 30_000,
      application_name: this.o.application ?? 'rootbox',
      keepAlive: true,
      // a statement of a host that died (kill -9) while it waited on a lock is cancelled within
      // a second instead of committing when the lock frees: PostgreSQL otherwise notices a gone
      // client only when it answers, after that host's restart has already cleaned up
      options: '-c client_connection_check_interval=1000',
    });
    // an idle client's error (the server restarted) must not take the process down
    pool.on('error', () => {});
    return pool;
  }

  /** The single-host URL in use now (the one that takes writes, after a failover): for a
   *  dedicated connection such as the placement cache's LISTEN. Never logged (it has the password). */
  get target(): string {
    return this.targets[this.current];
  }

  /** Which of the URL's hosts is in use (0 for a single-host URL). */
  get using(): number {
    return this.current;
  }

  /** One statement; a registry that cannot be reached is registry_unavailable. */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<pg.QueryResult<R>> {
    await this.ready();
    try {
      return await this.pool.query<R>(sql, params);
    } catch (err) {
      throw this.failed(err);
    }
  }

  /** fn inside one transaction (BEGIN … COMMIT, ROLLBACK on any throw). */
  async tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    await this.ready();
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw this.failed(err);
    }
    let broken = false;
    // while checked out, pg-pool listens for nothing: a server that ends the connection between two
    // statements (57P01: a stop, a failover, pg_terminate_backend) emits 'error' on the client,
    // which unheard ends the process; the next statement fails with it and the client is dropped
    const lost = () => (broken = true);
    client.on('error', lost);
    try {
      await client.query('BEGIN');
      const out = await fn(client);
      await client.query('COMMIT');
      return out;
    } catch (err) {
      broken = isUnavailable(err);
      if (!broken) await client.query('ROLLBACK').catch(() => (broken = true));
      throw this.failed(err);
    } finally {
      client.off('error', lost);
      client.release(broken);
    }
  }

  /** The error callers see; a failure to reach the registry also starts the search for the host that takes writes now. */
  private failed(err: unknown): unknown {
    if (!isUnavailable(err)) return err;
    if (this.targets.length > 1) this.looking ??= this.findPrimary(this.current + 1).finally(() => (this.looking = undefined));
    return AppError.of('registry_unavailable', 'the cluster registry cannot be reached; try again shortly', { retryAfter: 5, cause: err });
  }

  /** Asks every host at once whether it is one the URL's target_session_attrs accepts and
   *  switches to one that is: for read-write and primary (one host at a time is) the first to
   *  say so, so a dead host that does not answer (its connect timing out) does not hold up the
   *  one promoted after it; otherwise the first in the URL's order from `from` on (wrapping
   *  around), as libpq (prefer-standby: the first standby, else the first that answered). None:
   *  the pool stays, and its next failure looks again. */
  private async findPrimary(from: number): Promise<void> {
    const n = this.targets.length;
    const order = Array.from({ length: n }, (_, k) => (from + k) % n);
    const asks = order.map((i) => this.ask(this.targets[i]));
    if (this.attrs === 'read-write' || this.attrs === 'primary') {
      const first = await new Promise<number | undefined>((resolve) => {
        let left = n;
        asks.forEach(
          (ask, k) =>
            void ask.then((state) => {
              if (state && fits(this.attrs, state)) resolve(order[k]);
              if (--left === 0) resolve(undefined);
            }),
        );
      });
      if (first !== undefined) this.use(first);
      return;
    }
    let answered: number | undefined;
    for (let k = 0; k < n; k++) {
      const state = await asks[k];
      if (!state) continue;
      answered ??= order[k];
      if (fits(this.attrs, state)) return this.use(order[k]);
    }
    if (this.attrs === 'prefer-standby' && answered !== undefined) this.use(answered);
  }

  /** Whether the host is a standby and whether it takes no writes; undefined when it does not answer. */
  private async ask(url: string): Promise<{ standby: boolean; readOnly: boolean } | undefined> {
    const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: this.o.connectTimeoutMs, query_timeout: this.o.statementTimeoutMs });
    c.on('error', () => {});
    this.asking.add(c);
    try {
      await c.connect();
      const r = await c.query<{ standby: boolean; ro: string }>("SELECT pg_is_in_recovery() AS standby, current_setting('transaction_read_only') AS ro");
      return { standby: r.rows[0]?.standby === true, readOnly: r.rows[0]?.ro === 'on' };
    } catch {
      return undefined; // this host does not answer: the next one
    } finally {
      this.asking.delete(c);
      await c.end().catch(() => {});
    }
  }

  private use(i: number): void {
    if (i === this.current) return;
    const old = this.pool;
    this.pool = this.open(this.targets[i]);
    this.current = i;
    void old.end().catch(() => {});
  }

  async end(): Promise<void> {
    await this.looking;
    for (const c of this.asking) void c.end().catch(() => {});
    await this.pool.end().catch(() => {});
  }
}
