// The connection to the cluster registry: a small pg Pool with a connect and a statement
// deadline, every failure to reach it (refused, reset, timed out, the server shutting down, in
// recovery or read-only) told as the stable 503 registry_unavailable, and the URL's password
// never in a message or a log line.
//
// Failover: the URL may name several hosts as libpq does (postgres://u:p@db1:5432,db2:5432/db):
// the primary and its standbys. After a failure to reach the one in use, the pool looks for the
// host that takes writes now (pg_is_in_recovery() false) and uses it from the next statement on.
// The failed statement itself is not repeated (it may have committed): its caller gets 503 and
// tries again, and a lock or claim committed before the failover is on the promoted standby
// (synchronous replication), so a replay is still refused.

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
  private current = 0;
  private pool: pg.Pool;
  private looking?: Promise<void>;

  constructor(private readonly o: PoolOptions) {
    this.where = redactUrl(o.url);
    this.targets = splitHosts(o.url);
    this.pool = this.open(this.targets[0]);
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
    await this.looking;
    try {
      return await this.pool.query<R>(sql, params);
    } catch (err) {
      throw this.failed(err);
    }
  }

  /** fn inside one transaction (BEGIN … COMMIT, ROLLBACK on any throw). */
  async tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    await this.looking;
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw this.failed(err);
    }
    let broken = false;
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
      client.release(broken);
    }
  }

  /** The error callers see; a failure to reach the registry also starts the search for the host that takes writes now. */
  private failed(err: unknown): unknown {
    if (!isUnavailable(err)) return err;
    if (this.targets.length > 1) this.looking ??= this.findPrimary().finally(() => (this.looking = undefined));
    return AppError.of('registry_unavailable', 'the cluster registry cannot be reached; try again shortly', { retryAfter: 5, cause: err });
  }

  /** Asks each host, the next ones first, whether it takes writes; switches to the first that does. */
  private async findPrimary(): Promise<void> {
    const n = this.targets.length;
    for (let k = 1; k <= n; k++) {
      const i = (this.current + k) % n;
      const c = new pg.Client({
        connectionString: this.targets[i],
        connectionTimeoutMillis: this.o.connectTimeoutMs,
        query_timeout: this.o.statementTimeoutMs,
      });
      c.on('error', () => {});
      try {
        await c.connect();
        const r = await c.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
        if (r.rows[0]?.standby === false) {
          if (i !== this.current) {
            const old = this.pool;
            this.pool = this.open(this.targets[i]);
            this.current = i;
            void old.end().catch(() => {});
          }
          return;
        }
      } catch {
        // this host does not answer: the next one
      } finally {
        await c.end().catch(() => {});
      }
    }
  }

  async end(): Promise<void> {
    await this.looking;
    await this.pool.end().catch(() => {});
  }
}
