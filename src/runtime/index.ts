// Public surface of the runtime: the only module that spawns processes for servers (runc, ip, nft, mount…).
export type {
  DiskCapture,
  DiskSource,
  NetBounds,
  Runtime,
  RuntimeServer,
  StartGuard,
  ServerSpec,
  ServerState,
  ServerStats,
  ExecOptions,
  PtyOptions,
  PipeProcess,
  PtyProcess,
  ExitInfo,
} from './types.js';
export { createRuntime, type CreatedRuntime, type RuntimeSettings } from './factory.js';
export { ContainerRuntime } from './runtime.js';
export { syncDisk, type SyncDisk } from './diskcopy.js';
export { buildImage, findImage, imageBuildCommand, imageOptions, imageTag, isBuilt, recipeHash, type ImageSettings } from './image.js';
export { formatImages, listImages, pruneImages, serverTag, type ImageInfo } from './images.js';
export type { ReconcileReport } from './reconcile.js';
export { Lxcfs, lxcfsState, LXCFS_PROC_FILES } from './lxcfs.js';
export { OomWatch, ROOTBOX_LOG, OOM_MARK, oomKillsIn, appendRootboxLog } from './oom.js';
export { FlowWatch, DROP_MARK } from './flowwatch.js';
export { openFileIn, readTail } from './rootfile.js';
export { assertServable, traverseAdvice, untraversable } from './traverse.js';
export { checkoutRoot, nativeBinary, type NativeProgram } from './native.js';
export { run as runCommand } from './proc.js';
export { startFlowWatch, startLxcfs, startOomWatch } from './part.js';
export { hostClaims, hostNamesCheck, lockDataDir, lockHost, type HostLock } from './locks.js';
export { cleanHost, type CleanReport } from './clean.js';
export { seedServer, type Seed } from './seed.js';
export { startFenceWatch, fenceCgroup, type FenceWatch } from './fencewatch.js';
export { cgroupPath } from './spec.js';
export { keepAside, keptAside, lostFoundDir, LOST_FOUND, type KeptAside } from './lostfound.js';
