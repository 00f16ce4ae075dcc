// The object store under checkpoints: named, immutable blobs (encrypted chunks and checkpoint
// manifests, already sealed by the layer above). Two backends implement it: a directory on the
// host (the embedded default, <dataDir>/checkpoints) and any S3-compatible object store. Nothing
// above this interface knows which one it talks to; nothing below it knows what a blob holds.
//
// Keys are relative, '/'-separated, made of [A-Za-z0-9._-] segments (the layer above makes them,
// e.g. `chunks/ab/abcdef…`, `manifests/<server>/<checkpoint>`); a backend refuses any other key.
// A backend that cannot reach its store (connection refused, timeout, 5xx, throttling) throws
// StoreUnavailableError, which the API answers 503 `store_unavailable` with Retry-After; any other
// failure is the host's own (InternalError).

/** The store could not be reached or refused to work for now; the operation may be retried. */
export class StoreUnavailableError extends Error {
  constructor(detail: string, options?: { cause?: unknown }) {
    super(detail, options);
    this.name = 'StoreUnavailableError';
  }
}

export interface BlobStore {
  /** 'dir' or 's3', for logs, metrics and the operator's status. */
  readonly kind: 'dir' | 's3';
  /** Where it is, for the operator (a directory or s3://bucket/prefix; never credentials). */
  readonly where: string;
  /** Writes a blob whole, durably (fsynced / acknowledged by the store) before it resolves.
   *  Writing a key that exists replaces it (chunks are content-addressed, so that is the same bytes). */
  put(key: string, body: Uint8Array): Promise<void>;
  /** The blob's bytes, or null when there is no such key. */
  get(key: string): Promise<Uint8Array | null>;
  /** Whether the key exists (a HEAD; no body read). */
  has(key: string): Promise<boolean>;
  /** Every key under the prefix ('' for all), in no promised order, with its size in bytes. */
  list(prefix: string): AsyncIterable<{ key: string; size: number }>;
  /** Removes the key; removing a missing key is not an error. */
  delete(key: string): Promise<void>;
  /** Releases connections and handles. */
  close(): Promise<void>;
  /** Removes what killed puts left and no listing shows (the directory backend's temporary files)
   *  not modified for `olderThanMs` (at `now`, default the wall clock); returns how many. Absent: puts leave nothing. */
  sweepTemp?(olderThanMs: number, now?: number): Promise<number>;
}
