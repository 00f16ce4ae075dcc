// The CLI side of the admin channel: one JSON request to the daemon serving a data dir.
// `undefined` means no daemon listens there (no socket, or a socket nobody accepts on).

import { request } from 'node:http';
import { adminSocketPath } from './server.js';

export interface AdminAnswer {
  status: number;
  body: Record<string, unknown>;
}

export function callAdmin(dataDir: string, method: string, path: string, body?: unknown, timeoutMs = 120_000): Promise<AdminAnswer | undefined> {
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        socketPath: adminSocketPath(dataDir),
        method,
        path,
        headers: { host: 'admin', ...(data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {}) },
        timeout: timeoutMs,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (text += c));
        res.on('end', () => {
          try {
            resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) });
          } catch {
            reject(new Error(`the daemon answered ${res.statusCode} without JSON`));
          }
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`the daemon did not answer within ${timeoutMs / 1000} s`)));
    req.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT' || e.code === 'ECONNREFUSED') resolve(undefined);
      else reject(e);
    });
    req.end(data);
  });
}
