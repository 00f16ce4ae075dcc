// Public surface of checkpoints (issue 37): a server's disk copied, chunked, deduplicated,
// encrypted and kept in a blob store (a directory on the host, or an S3-compatible object store);
// restored or forked from there, every chunk verified; unreferenced chunks collected.
export { StoreUnavailableError, type BlobStore } from './blobs.js';
export { DirBlobStore, validKey } from './dirstore.js';
export { BaseMismatch, CheckpointEngine, CHUNK_SIZE, MissingBlobError, chunksOf, type DataRanges, type EngineDeps, type NewCheckpoint } from './engine.js';
export { collect, type GcReport } from './gc.js';
export { keys as blobKeys, newCheckpointId, isCheckpointId, byLineage, type CheckpointKind, type Manifest, type ServerSettings } from './manifest.js';
export { CorruptBlobError, hostSecret, type CheckpointSecret } from './seal.js';
export { Checkpoints, publicError, type Taken } from './service.js';
export { openS3BlobStore, type S3Settings, type S3StoreOptions } from './s3.js';
export { startCheckpoints, type CheckpointParts } from './start.js';
