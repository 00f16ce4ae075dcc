// The runtime's contract with the rest of the daemon (hosting, proxy, ssh, billing). The
// implementation lives beside this file; callers import these types from src/runtime/index.ts.

import type { Readable, Writable } from 'node:stream';
import type { NetBounds } from './netbounds.js';

export type { NetBounds };

/** A consistent copy of a disk image, and how it was taken. */
export interface DiskCapture {
  /** Host path of the copy (removed by the runtime once the caller is done with it). */
  path: string;
  /** [start, end) byte ranges that may hold data; the rest of the copy is holes. Absent when
   *  the extents could not be read (every chunk is then read). */
  ranges?: [number, number][];
  /** How long the server's writes were held (freeze to thaw), in ms. */
  pausedMs: number;
  /** How the copy was made. */
  method: 'reflink' | 'copy';
  /** The host uid of the server's root: its files on the disk are owned from there on. */
  uidBase: number;
  /** When the disk image was last written as the copy holds it (its mtime, read the instant the
   *  thaw returns — before what the freeze held can reach the image — or before the thaw): a
   *  later diskWrittenAt says the server wrote since. */
  writtenAt: number;
}

/** A disk made from a checkpoint rather than empty (a fork). */
export interface DiskSource {
  /** Writes a complete image at the path it is given. */
  fill(path: string): Promise<void>;
  /** The base image the checkpoint's disk goes over (its tag); absent: the current one. */
  image?: string;
  /** The host uid of the checkpointed server's root: its files move to this server's range. */
  uidBase?: number;
  /** A new server made from another's disk (a fork): its SSH host keys and machine id are reset
   *  (forkidentity.ts). Absent: the same server made on another host (a move, a recovery), which
   *  keeps its own. */
  fork?: boolean;
}

export type ServerState = 'creating' | 'running' | 'sleeping' | 'waking' | 'stopped' | 'failed';

/** What a server is, as its owner (hosting's server record) gives it to the runtime: at create,
 *  and its limits again at resize. The runtime stores none of it in its own record; it keeps
 *  what it applied in the server's bundle (hostname, memory limit) and disk image (size). */
export interface ServerSpec {
  /** `srv_<id>`; also the container id under runc. */
  id: string;
  /** Hostname inside the container. */
  slug: string;
  /** cgroup memory limit (tier RAM ceiling). */
  memoryBytes: number;
  /** Size of the server's disk image (tier disk ceiling). */
  diskBytes: number;
  /** Bounds on its outbound connections (tier; runtime.egress); without them the anonymous tier's. */
  net?: NetBounds;
  /** Keep the runtime record pending after create (the caller commits it, store.commitCreate)
   *  until this deadline; without it the runtime commits its record itself once created. */
  pendingUntil?: number;
  /** A fork: the disk comes from a checkpoint instead of being made empty. */
  fromDisk?: DiskSource;
  /** false: made asleep (parked when runtime.parkOnSleep is on), never booted here; the caller
   *  starts it later through start() and its start guard (a server moved here: once placed here). */
  start?: boolean;
}

export interface RuntimeServer {
  id: string;
  slug: string;
  /** Container address on the bridge, e.g. 10.88.0.5. */
  ip: string;
  /** First host uid/gid of the server's 65536-id range; container uid 0 maps to it. */
  uidBase: number;
  /** The limits as applied (last create or resize), not as wanted (the server record's). */
  memoryBytes: number;
  diskBytes: number;
  /** Bounds on its outbound connections as applied; absent in a runtime that enforces none. */
  net?: NetBounds;
  /** Host path of the server's merged root filesystem; mounted while the server exists, asleep too. */
  rootfs: string;
  state: ServerState;
}

export interface ServerStats {
  memoryBytes: number;
  oomKills: number;
  diskUsedBytes: number;
  egressBytes: number;
}

export interface ExecOptions {
  argv: string[];
  env?: Record<string, string>;
  cwd?: string;
}

export interface PtyOptions extends ExecOptions {
  cols: number;
  rows: number;
  term: string;
}

export interface ExitInfo {
  code: number | null;
  /** Signal that ended the process (e.g. SIGTERM); code is null then. */
  signal: string | null;
  coreDumped?: boolean;
}

/** A process inside a server without a terminal: binary-safe pipes. */
export interface PipeProcess {
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  exited: Promise<ExitInfo>;
  /** Signals runc (which forwards to the top process only). */
  kill(signal?: NodeJS.Signals): void;
  /** Signals the command from the host, starting no process in the server (one whose pids are
   *  all taken could start none): HUP or TERM reach the command's process group (the exec wrapper
   *  forwards them); KILL ends every process the exec started, wherever it went in the server
   *  (the exec's own cgroup, frozen while it is emptied), and resolves once they are gone. */
  signalAll(sig: 'HUP' | 'TERM' | 'KILL'): Promise<void>;
}

/** A process inside a server on a pseudo-terminal (runc exec -t under node-pty). */
export interface PtyProcess {
  onData(fn: (data: Buffer) => void): void;
  /** Stops reading the terminal (the program blocks once its output buffer is full). */
  pause(): void;
  resume(): void;
  /** Queues input; false when the queue is long: wait for onDrain before writing more. */
  write(data: string | Buffer): boolean;
  onDrain(fn: () => void): void;
  resize(cols: number, rows: number): void;
  exited: Promise<ExitInfo>;
  /** Signals runc (which forwards to the top process only). */
  kill(signal?: NodeJS.Signals): void;
  /** Signals the command from the host, starting no process in the server (one whose pids are
   *  all taken could start none): HUP or TERM reach the command's process group (the exec wrapper
   *  forwards them); KILL ends every process the exec started, wherever it went in the server
   *  (the exec's own cgroup, frozen while it is emptied), and resolves once they are gone. */
  signalAll(sig: 'HUP' | 'TERM' | 'KILL'): Promise<void>;
}

/** Resolves when this host may start the server's container, throws an AppError when it may not
 *  (cluster mode: the registry's wake fence, given by main.ts; absent on a single box). The
 *  runtime asks it before every start of an existing server: Runtime.start (wake, restart,
 *  resume), a repair's restart, the boot-time reconcile of a server that should run — inside the
 *  server's queue. `waitFor`, when given, is asked first, outside that queue: what a start must
 *  wait for while other work on the server goes on (a move of it under way, whose stop and
 *  checkpoint need the queue: waited for inside it, the two would wait on each other forever). */
export interface StartGuard {
  (serverId: string): Promise<void>;
  waitFor?: (serverId: string) => Promise<void> | undefined;
}

export interface Runtime {
  /** Writes the server's runtime record (pending, with its address and uid range) at once, so
   *  the caller writes its own record in the same store transaction (Store.atomically); create()
   *  of the same spec then builds on it. Throws, reserving nothing, when the id exists or a pool
   *  is exhausted. Absent in a runtime that keeps no records in the store. */
  reserve?(spec: ServerSpec): void;
  /** Allocates ids (unless reserved), disk, network identity and bundle, and starts the server. */
  create(spec: ServerSpec): Promise<RuntimeServer>;
  /** Starts a stopped/sleeping server (wake). Resolves once its init runs. Every start of a
   *  server that is not running first awaits the runtime's start guard (StartGuard), which may
   *  refuse it: the server is then left as it was and the guard's error is thrown. */
  start(id: string): Promise<void>;
  /** Stops the container (SIGTERM, grace, SIGKILL); memory freed; disk, mounts and IP kept.
   *  `park: false`: not parked even where runtime.parkOnSleep is on (a stop for the memory floor).
   *  `graceMs`: this stop's grace instead of runtime.stopGrace; 0 kills a frozen server where it
   *  stands, never thawed to run again first (the self-fence's stop of a server it froze). */
  stop(id: string, opts?: { park?: boolean; graceMs?: number }): Promise<void>;
  /** Doze: freezes every process of a running server (cgroup freezer); memory, sockets and the
   *  container are kept. Resolves with the memory it holds frozen (`anonBytes`: its anonymous part,
   *  what a stop gives back to the host). Absent where it cannot be done. */
  freeze?(id: string): Promise<{ memoryBytes: number; anonBytes?: number }>;
  /** Lets the processes of a frozen server run again (a no-op when it is not frozen). */
  thaw?(id: string): Promise<void>;
  /** Whether thaw() makes its cgroup write before it returns (nothing else is queued for the
   *  server, as a checkpoint's copy or a resize can be); absent: it always does. */
  thawsAtOnce?(id: string): boolean;
  /** Calls `fn` with the id of each server whose processes this daemon thaws, whatever thawed
   *  them (a doze's end, a stop, a fence), once the call that thawed them is done. */
  onThawed?(fn: (id: string) => void): void;
  /** Whether a running server's processes are frozen now — also by a daemon before this one (a
   *  doze outlives a restart): the memory it holds frozen, as freeze() gives it; undefined when
   *  it is not frozen. Absent where servers cannot be frozen. */
  frozen?(id: string): { memoryBytes: number; anonBytes?: number } | undefined;
  /** Sleeping servers parked with a `created` container (runtime.parkOnSleep): since when, and
   *  the host memory their waiting init holds. Absent where servers are never parked. */
  parked?(): { id: string; since: number; memoryBytes: number }[];
  /** Removes a parked server's container (it stays asleep; its next wake is cold). Resolves false
   *  when it was no longer parked. */
  unpark?(id: string): Promise<boolean>;
  /** Removes everything the server had: container, mounts, loop device, veth, rules, ids. */
  delete(id: string): Promise<void>;
  /** Raises (or lowers) the memory limit live, grows the disk online and changes the bounds on
   *  its connections (when given) at once. */
  resize(id: string, limits: { memoryBytes: number; diskBytes: number; net?: NetBounds }): Promise<void>;
  exec(id: string, opts: ExecOptions): PipeProcess;
  execPty(id: string, opts: PtyOptions): PtyProcess;
  stats(id: string): Promise<ServerStats>;
  /** Disk used by the server's image, from one statfs (cheap; for read endpoints). */
  diskUsedBytes(id: string): number;
  get(id: string): RuntimeServer | undefined;
  list(): RuntimeServer[];
  /** Checkpoints (issue 37): a crash-consistent copy of the server's disk, taken with its
   *  filesystem frozen for as short as possible (a sleeping server is not woken), given to `use`
   *  and removed once `use` settles. Absent where disks cannot be copied. */
  captureDisk?<T>(id: string, use: (copy: DiskCapture) => Promise<T>): Promise<T>;
  /** When the server's own files last changed: the newest ctime over what it wrote on its disk
   *  (ms; undefined for an unknown server). Unlike diskWrittenAt, not moved by mounting the disk
   *  or by the runtime's own files on it. Absent where servers have no disk. */
  filesChangedAt?(id: string): number | undefined;
  /** When the server's disk image was last written (ms; undefined for an unknown server). After
   *  a flush of its disk that failed (a stop's), no earlier than that failure: what it wrote may
   *  reach the image at any time, so the disk reads as changed since any checkpoint before it. */
  diskWrittenAt?(id: string): number | undefined;
  /** The server's mounted disk flushed (what the runtime wrote on it — a restore's mount,
   *  owners, name files — reaches the image now, not at a later writeback), then its image's
   *  mtime: what diskWrittenAt says while nothing writes it. Undefined for an unknown server, or
   *  when the flush failed (the mtime does not hold what is still to reach the image). */
  settledDiskAt?(id: string): Promise<number | undefined>;
  /** Restore: `fill` writes a complete image at the path it is given (beside the old one; it
   *  need not fsync it: the runtime does, beside the server's stop); only then is the server
   *  stopped, the image renamed over its disk, and the server started again when it was running.
   *  A `fill` that throws changes nothing (its file is removed). */
  replaceDisk?(id: string, fill: (path: string) => Promise<void>, from?: { uidBase?: number }): Promise<void>;
  /** The daemon's stop: lets go of what the runtime holds on the host (its host-name locks,
   *  watchers); servers keep running. */
  close?(): Promise<void>;
}
