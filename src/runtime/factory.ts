// Building the runtime from the config: finds the base image and the built idmapped-mount helper,
// writes the init files, opens the data dir for container roots, sets up bridge and nftables,
// takes the host-name locks (locks.ts: one daemon per bridge, nft table, subnet, uid range, port
// pool, data dir) and reconciles runc with the store. main.ts calls it as its default runtime part.

import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { RuntimeStore } from '../store/index.js';
import type { StartGuard } from './types.js';
import type { RuntimeDeps } from './deps.js';
import { mountDevices } from './devices.js';
import { ensureExecWrapper } from './execwrap.js';
import { helperPath } from './helper.js';
import { findImage, imageBuildCommand, imageOptions, recipeHash } from './image.js';
import { reconcile, type ReconcileReport } from './reconcile.js';
import { ContainerRuntime } from './runtime.js';
import { hostClaims, lockHost, type HostLock } from './locks.js';
import { ensureInitDir } from './supervisor.js';
import { assertTraversable, openDataDir } from './traverse.js';

export type RuntimeSettings = Pick<Config, 'dataDir' | 'runtime'> & Partial<Pick<Config, 'hosting' | 'metrics'>>;

export interface CreatedRuntime {
  runtime: ContainerRuntime;
  reconciled?: ReconcileReport;
}

/**
 * Prepares the host and returns the runtime. Throws `image_missing` when the base image of the
 * current recipe has not been built (`rootbox image build`). `mayStart`: the start guard asked
 * before every start of an existing server, the reconcile's included (cluster mode: the wake fence).
 * `effects`: outside effects given instead of the host's (a test's failing disk flush).
 */
export async function createRuntime(
  cfg: RuntimeSettings,
  store: RuntimeStore,
  log: Logger,
  mayStart?: StartGuard,
  /** The host-name locks, when the caller took them first (the daemon does, before anything else). */
  held?: HostLock,
  effects: Pick<RuntimeDeps, 'syncDisk'> = {},
): Promise<CreatedRuntime> {
  const img = imageOptions(cfg);
  const image = findImage(img);
  if (!image)
    throw AppError.of('image_missing', `base image ${img.name} (recipe ${recipeHash()}) is not built in ${img.imageDir}; run: ${imageBuildCommand(cfg)}`);
  assertTraversable(cfg.dataDir, img.imageDir);
  const lock = held ?? (await lockHost(hostClaims(cfg)));
  try {
    return await prepare(cfg, store, log, image, lock, mayStart, effects);
  } catch (e) {
    if (!held) await lock.release();
    throw e;
  }
}

async function prepare(
  cfg: RuntimeSettings,
  store: RuntimeStore,
  log: Logger,
  image: NonNullable<ReturnType<typeof findImage>>,
  lock: HostLock,
  mayStart: StartGuard | undefined,
  effects: Pick<RuntimeDeps, 'syncDisk'>,
): Promise<CreatedRuntime> {
  lock.onLost(() => log.error('the host-name lock helper ended while the daemon runs: another daemon may now take these names', { names: lock.names }));
  openDataDir(cfg.dataDir);
  const helper = helperPath();
  const initDir = ensureInitDir(join(cfg.dataDir, 'runtime', 'init'));
  await mountDevices(cfg.dataDir);
  const execWrapper = ensureExecWrapper(initDir, (err) => log.warn('exec wrapper not available; a command killed by a signal reads as exit 128+n', { err }));
  const runtime = new ContainerRuntime({
    dataDir: cfg.dataDir,
    cfg: cfg.runtime,
    store,
    log: log.child({ part: 'runtime' }),
    image,
    helper,
    initDir,
    execWrapper,
    hostLock: lock,
    mayStart,
    ...effects,
  });
  await runtime.net.setup();
  const reconciled = cfg.runtime.reconcile === 'on' ? await reconcile(runtime) : undefined;
  runtime.netWatch.start();
  return { runtime, reconciled };
}
