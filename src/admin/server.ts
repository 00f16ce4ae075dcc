// The admin channel's listener: HTTP/1.1 on a unix socket in the data dir, mode 0600, so only
// the daemon's user (root) can connect. A socket left by a killed daemon is replaced; one that
// still answers means another daemon serves this data dir, and this one refuses to start.

import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { chmodSync, lstatSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { newRequestId, type Router } from '../http/index.js';
import type { Logger } from '../log/index.js';

/** Longest path a unix socket address holds on Linux (sun_path minus its NUL). */
const SUN_PATH_MAX = 107;

export const adminSocketPath = (dataDir: string): string => join(dataDir, 'admin.sock');

export interface AdminListener {
  /** Where it listens; undefined when the data dir's path is too long for a unix socket. */
  readonly path?: string;
  close(): Promise<void>;
}

/** True when something accepts connections on the socket at `path`. */
export function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

async function clearStale(path: string): Promise<void> {
  let isSocket: boolean;
  try {
    isSocket = lstatSync(path).isSocket();
  } catch {
    return; // nothing there
  }
  if (!isSocket) throw new Error(`${path} exists and is not a socket; remove it`);
  if (await answers(path)) throw new Error(`another rootbox daemon answers on ${path}; one daemon per data dir`);
  unlinkSync(path);
}

export async function listenAdmin(dataDir: string, router: Router, log: Logger): Promise<AdminListener> {
  const path = adminSocketPath(dataDir);
  if (Buffer.byteLength(path) > SUN_PATH_MAX) {
    log.warn(
      'admin channel off: the data dir path is too long for a unix socket; `rootbox admin` commands write to the store and the daemon applies them at its next billing pass',
      { path },
    );
    return { close: async () => {} };
  }
  await clearStale(path);
  const server: Server = createServer((req, res) => void router.handle(req, res, { host: 'admin', scheme: 'http', requestId: newRequestId(), ip: 'unix' }));
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // bind() happens inside listen(): the socket is created 0600 under this umask, never wider
    const umask = process.umask(0o177);
    try {
      server.listen(path, () => {
        server.off('error', reject);
        resolve();
      });
    } finally {
      process.umask(umask);
    }
  });
  chmodSync(path, 0o600);
  server.on('error', (err) => log.error('admin channel error', { err }));
  log.info('admin channel listening', { path });
  return {
    path,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
