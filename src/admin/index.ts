// The admin channel: how `bin/rootbox servers|accounts|status|admin …` (a separate process)
// reaches the running daemon. HTTP/1.1 with JSON bodies on `<dataDir>/admin.sock` (mode 0600:
// root only). The daemon side (routes.ts, actions.ts) is started by main.ts after every other
// part; the CLI side (cli-*.ts, commands.ts) asks the daemon when it answers and otherwise reads
// the store (and refuses what only the daemon can do). Views shared by both: views.ts, status.ts.

import { adminRouter } from './routes.js';
import type { AdminDeps } from './actions.js';
import { listenAdmin, type AdminListener } from './server.js';
import { announce } from './whereabouts.js';

export { adminSocketPath, type AdminListener } from './server.js';
export { callAdmin, type AdminAnswer } from './client.js';
export { creditCommand } from './commands.js';
export { adminMain, ADMIN_USAGE } from './cli-main.js';
export { locateDataDir, runningDaemons, type Whereabouts } from './whereabouts.js';
export { OPERATOR_SUSPENDED } from './views.js';
export { refuseIncompleteRebuild, REBUILD_MARK } from './rebuildmark.js';
export type { AdminDeps } from './actions.js';

/** The admin socket, and this daemon's whereabouts in cfg.runDir while it listens (whereabouts.ts). */
export async function startAdmin(dataDir: string, deps: AdminDeps): Promise<AdminListener> {
  const l = await listenAdmin(dataDir, adminRouter(deps), deps.log);
  if (!l.path) return l;
  const w = announce(deps.cfg.runDir, { dataDir, adminSocket: l.path });
  if (w.file) deps.log.debug('whereabouts written for the operator commands', { file: w.file });
  else if (w.unsafe) deps.log.warn('operator commands will not find this daemon without a flag', { detail: w.unsafe });
  else if (w.error) deps.log.debug('whereabouts not written', { detail: w.error });
  return {
    path: l.path,
    close: async () => {
      w.remove();
      await l.close();
    },
  };
}
