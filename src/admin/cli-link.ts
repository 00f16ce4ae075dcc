// How an admin CLI command reaches its data: the running daemon over the admin socket when it
// answers, otherwise the store read directly. Read-only commands work either way; commands that
// act on running servers refuse without a daemon (daemon_not_running), and the CLI writes the
// store itself only when no process holds it (`accounts credit` offline; restore).

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { AppError, isErrorCode } from '../errors.js';
import { logWhere } from '../log/index.js';
import { openStore, storeHolders } from '../store/index.js';
import { callAdmin, type AdminAnswer } from './client.js';
import { adminSocketPath } from './server.js';
import type { ViewDeps } from './views.js';

/** One request to the daemon; undefined when no daemon listens on the data dir's socket. */
export async function ask(dataDir: string, method: string, path: string, body?: unknown): Promise<AdminAnswer | undefined> {
  try {
    return await callAdmin(dataDir, method, path, body);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EPERM') throw AppError.of('admin_denied', "the daemon's admin socket is root only; run this as root");
    throw e;
  }
}

/** The body of a 200 answer; any other answer becomes the daemon's error. */
export function ok<T = Record<string, unknown>>(a: AdminAnswer): T {
  if (a.status === 200) return a.body as T;
  const rid = typeof a.body.request_id === 'string' ? a.body.request_id : undefined;
  const detail = String(a.body.detail ?? `the daemon answered ${a.status}`) + (a.status >= 500 && rid ? ` (the daemon's log says why: ${logWhere(rid)})` : '');
  throw AppError.of(isErrorCode(a.body.error) ? a.body.error : 'admin_failed', detail);
}

export function needDaemon(dataDir: string, what: string): never {
  throw AppError.of(
    'daemon_not_running',
    `no daemon answers on ${adminSocketPath(dataDir)}; \`rootbox ${what}\` acts on running servers through the daemon: start it (systemctl start rootbox) and repeat`,
  );
}

/** Refuses to write the store while another process (a daemon whose admin socket is off or
 *  unreachable, another CLI) has it open. */
export function assertStoreFree(dataDir: string, what: string): void {
  const pids = storeHolders(dataDir);
  if (pids.length) throw AppError.of('daemon_running', `process ${pids.join(', ')} has the store of ${dataDir} open; stop it before \`rootbox ${what}\``);
}

export const OFFLINE_NOTE = 'rootbox: the daemon is not running; read from the store (states are those the store keeps)';

/** Runs fn over the store of a stopped daemon (views without a live part), after saying so on
 *  stderr (stdout stays the answer, JSON with --json). */
export async function withStore<T>(cfg: Readonly<Config>, io: { err(text: string): void }, fn: (v: ViewDeps) => T): Promise<T> {
  if (!existsSync(join(cfg.dataDir, 'db', 'data.mdb')))
    throw AppError.of('no_store', `there is no store in ${cfg.dataDir} (is this the daemon's data dir? set ROOTBOX_DATA_DIR or --config)`);
  let store;
  try {
    store = openStore(cfg.dataDir);
  } catch (e) {
    if (e instanceof AppError) throw e;
    throw AppError.of('no_store', `cannot open the store of ${cfg.dataDir}: ${(e as Error).message}`);
  }
  io.err(OFFLINE_NOTE);
  try {
    return fn({ store, cfg });
  } finally {
    await store.close();
  }
}
