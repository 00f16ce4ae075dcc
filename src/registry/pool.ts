// The connection to the cluster registry: a small pg Pool with a connect and a statement
// deadline, every failure to reach it (refused, reset, timed out, the server shutting down or
// in recovery) told as the stable 503 registry_unavailable, and the URL's password never in a
// message or a log line.

import pg from 'pg';
import { AppError } from '../errors.js';

/** The URL with its password replaced, for logs and status lines. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    for (const k of [...u.searchParams.keys()]) if (/pass|secret|key/i.test(k)) u.searchParams.set(k, '***');
    return u.toString();
  } catch {
    return 'postgres://(unparsable URL)';
  }
}

/** SQLSTATE classes that mean "the registry is not usable now", not "the statement is wrong". */
const UNAVAILABLE_STATES = /^(08|53|57P|58)/;
const NETWORK = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE']);

export function isUnavailable(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (typeof e?.code === 'string' && (NETWORK.has(e.code) || UNAVAILABLE_STATES.test(e.code))) return true;
  return /timeout|terminat|Connection (ended|closed)|not queryable|read only/i.test(String(e?.message ?? ''));
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
  readonly pool: pg.Pool;
  readonly where: string;

  constructor(o: PoolOptions) {
    this.where = redactUrl(o.url);
    this.pool = new pg.Pool({
      connectionString: o.url,
      max: o.max ?? 8,
      connectionTimeoutMillis: o.connectTimeoutMs,
      statement_timeout: o.statementTimeoutMs,
      query_timeout: o.statementTimeoutMs + 1000,
      idleTimeoutMillis: 30_000,
      application_name: o.application ?? 'rootbox',
      keepAlive: true,
    });
    // an idle client's error (the server restarted) must not take the process down
    this.pool.on('error', () => {});
  }

  /** One statement; a registry that cannot be reached is registry_unavailable. */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<pg.QueryResult<R>> {
    try {
      return await this.pool.query<R>(sql, params);
    } catch (err) {
      throw this.translate(err);
    }
  }

  /** fn inside one transaction (BEGIN … COMMIT, ROLLBACK on any throw). */
  async tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw this.translate(err);
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
      throw this.translate(err);
    } finally {
      client.release(broken);
    }
  }

  private translate(err: unknown): unknown {
    if (!isUnavailable(err)) return err;
    return AppError.of('registry_unavailable', 'the cluster registry cannot be reached; try again shortly', { retryAfter: 5, cause: err });
  }

  async end(): Promise<void> {
    await this.pool.end().catch(() => {});
  }
}
