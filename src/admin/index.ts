// The admin channel: how `bin/rootbox admin …` (a separate process) reaches the running daemon.
// HTTP/1.1 with JSON bodies on `<dataDir>/admin.sock` (mode 0600: root only). The daemon side is
// started by main.ts after the services; the CLI side falls back to the store when no daemon
// listens. Commands live in commands.ts (CLI) and routes.ts (daemon).

import type { Logger } from '../log/index.js';
import { adminRouter, type AdminDeps } from './routes.js';
import { listenAdmin, type AdminListener } from './server.js';

export { adminSocketPath, type AdminListener } from './server.js';
export { callAdmin, type AdminAnswer } from './client.js';
export { creditCommand } from './commands.js';
export type { AdminDeps } from './routes.js';

export function startAdmin(dataDir: string, deps: AdminDeps & { log: Logger }): Promise<AdminListener> {
  return listenAdmin(dataDir, adminRouter(deps), deps.log);
}
