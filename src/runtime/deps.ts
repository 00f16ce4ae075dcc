// What a container runtime (runtime.ts) is made from: its data dir, config slice, store records,
// the image new servers go over, the native helpers, the host-name locks and the start guard.
// factory.ts builds it for the daemon; the runtime's parts (create.ts, park.ts, diskswap.ts …)
// each take the slice they use.

import type { RuntimeConfig } from '../config/index.js';
import type { Logger } from '../log/index.js';
import type { RuntimeStore } from '../store/index.js';
import type { SyncDisk } from './diskcopy.js';
import type { HostLock } from './locks.js';
import type { StartGuard } from './types.js';

export interface RuntimeDeps {
  dataDir: string;
  cfg: RuntimeConfig;
  store: RuntimeStore;
  log: Logger;
  /** Rootfs of the current recipe's base image (`<imageDir>/<name>-<hash>/rootfs`): the idmapped
   *  lower layer of new servers. An existing server keeps the image its record names (images.ts),
   *  from the same image dir, whatever the current recipe is. */
  image: string;
  /** Compiled mount helper (idmapped overlay, loop-mounted disk). */
  helper: string;
  /** Directory bind-mounted at /run/rootbox (tini + supervisor). */
  initDir: string;
  /** Host path of the rbx-exec wrapper in initDir (execwrap.ts); without it execs run unwrapped. */
  execWrapper?: string;
  /** The host-name locks this runtime's daemon holds (locks.ts), let go by close(). */
  hostLock?: HostLock;
  /** The start guard (types.ts StartGuard), asked before every start of an existing server
   *  (cluster mode: the wake fence); absent: every start may go. */
  mayStart?: StartGuard;
  /** How a server's mounted disk is flushed to its image (diskcopy.ts syncDisk, `sync -f`, when absent). */
  syncDisk?: SyncDisk;
}
