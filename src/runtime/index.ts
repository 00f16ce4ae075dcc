// Public surface of the runtime: the only module that spawns processes (runc, ip, nft, mount…).
export type { Runtime, RuntimeServer, ServerSpec, ServerState, ServerStats, ExecOptions, PtyOptions, PipeProcess, PtyProcess, ExitInfo } from './types.js';
export { hostChecks, formatChecks, runDoctor, acmeCheck, type Check } from './doctor.js';
export { createRuntime, type CreatedRuntime, type RuntimeSettings } from './factory.js';
export { ContainerRuntime } from './runtime.js';
export { buildImage, findImage, imageOptions, imageTag, recipeHash } from './image.js';
export { listImages, pruneImages, type ImageInfo } from './images.js';
export { imageCommand } from './imagecli.js';
export type { ReconcileReport } from './reconcile.js';
export { Lxcfs, lxcfsState, LXCFS_PROC_FILES } from './lxcfs.js';
export { OomWatch, ROOTBOX_LOG, OOM_MARK, oomKillsIn } from './oom.js';
export { readTail } from './rootfile.js';
export { installCommand } from './installcli.js';
export { assertServable } from './traverse.js';
export { run as runCommand } from './proc.js';
