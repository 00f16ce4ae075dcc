// /servers/{id}/files: files of a server over HTTP. Every operation is a small shell script run
// inside the server as its root by commands.ts (`runc exec`, like an SSH exec), so paths resolve
// in the server's own mount namespace: a symlink leads to its target inside the server, never to a
// host path or another server's, and writes land on the server's own disk within its ceiling. A
// sleeping server is woken for them (and held awake while they run), except a GET of a file
// reached without any symlink: that is read from its mounted disk (runtime's openFileIn, every
// component opened O_NOFOLLOW) without waking it. Exit codes of the scripts
// name the failure: 44 nothing there, 21 a directory where a file is wanted, 20 not a directory,
// 13 nothing may be created there (403 path_not_writable: /proc, /sys, a read-only mount), 28 and
// anything with "No space left on device" on stderr the disk ceiling (507 disk_full). An upload
// leaves nothing of itself behind when it fails: a file goes to a temporary name first, an
// archive is unpacked into a scratch directory beside its target (hard-linked into place once
// whole, removed otherwise). A listing reads at most the entries it can return (`head -z` in the
// server stops find; the daemon parses as it reads).

import type { FileHandle } from 'node:fs/promises';
import { posix } from 'node:path';
import { z } from 'zod';
import { AppError } from '../errors.js';
import { HANDLED, type HandlerResult, type Req, type Res } from '../http/index.js';
import { openFileIn } from '../runtime/index.js';
import type { AccountRecord, ServerRecord } from '../store/index.js';
import { tierOf } from './accounts.js';
import { collect, EXEC_PATH, whenClientLeaves, type Commands, type Running } from './commands.js';
import type { ExecSettings } from './exec.js';
import { FileEntry, LIST_MAX, parseRange, readHeaders, Written } from './fileshapes.js';

/** The scripts, each `sh -c SCRIPT sh PATH [ARG…]`; see the header for the exit codes. */
const S = {
  stat: '[ -e "$1" ] || exit 44; [ -d "$1" ] && exit 21; [ -f "$1" ] || exit 21; exec stat -L -c %s -- "$1"',
  read: 'exec dd if="$1" bs=65536 skip="$2" count="$3" iflag=skip_bytes,count_bytes status=none',
  write:
    '[ -d "$1" ] && exit 21; d=${1%/*}; mkdir -p -- "${d:-/}" || exit 20; t="$1.rbx-upload.$$"; trap \'rm -f -- "$t"; exit 143\' TERM HUP; ' +
    'true > "$t" || exit 13; if cat > "$t"; then [ -z "$2" ] || chmod "$2" -- "$t" || { rm -f -- "$t"; exit 1; }; mv -f -- "$t" "$1" || { rm -f -- "$t"; exit 1; }; stat -c %s -- "$1"; ' +
    'else rm -f -- "$t"; exit 28; fi',
  remove: '[ "$1" = / ] && exit 21; [ -e "$1" ] || [ -L "$1" ] || exit 44; exec rm -rf -- "$1"',
  list:
    '[ -e "$1" ] || exit 44; [ -d "$1" ] || exit 20; cd -- "$1" || exit 20; ' +
    'find . -mindepth 1 -maxdepth 1 -printf "%f\\0%s\\0%m\\0%T@\\0%y\\0" | head -z -n "$2"',
  pack: '[ -e "$1" ] || exit 44; [ -d "$1" ] || exit 20; exec tar -C "$1" -c $2 -f - .',
  unpack:
    'mkdir -p -- "$1" || exit 20; [ -d "$1" ] || exit 20; t="$1/.rbx-unpack.$$"; trap \'rm -rf -- "$t"; exit 143\' TERM HUP; ' +
    'mkdir -- "$t" || exit 13; tar -C "$t" -x $2 -f -; s=$?; ' +
    // hard links into place; copies where a link cannot go (another mount under the target)
    'if [ "$s" = 0 ]; then cp -al --remove-destination -- "$t/." "$1/" 2>/dev/null || cp -a --remove-destination -- "$t/." "$1/"; ' +
    's=$?; rm -rf -- "$t"; exit "$s"; fi; ' +
    // a failed unpack: the disk ceiling when less than 1 MiB was left (tar only says "Wrote only N of M bytes")
    'a=$(stat -f -c "%a %S" -- "$t"); rm -rf -- "$t"; set -- $a; [ "$(($1 * $2))" -lt 1048576 ] && exit 28; exit "$s"',
};

export interface FilesDeps {
  commands: Commands;
  /** Host path of the root of a server that sleeps or dozes now (its disk is mounted), else undefined. */
  sleepingRoot(id: string): string | undefined;
  settings: ExecSettings;
  maxBody: number;
}

export class Files {
  constructor(private readonly d: FilesDeps) {}

  private run(account: AccountRecord, rec: ServerRecord, script: string, args: string[]): Promise<Running> {
    const argv = ['/bin/sh', '-c', script, 'sh', ...args];
    const env = { HOME: '/root', PATH: EXEC_PATH, LANG: 'C.UTF-8' };
    return this.d.commands.start(account, rec, { argv, env, cwd: '/' }, this.d.settings.timeoutMax[tierOf(account)] * 1000);
  }

  /** Runs a script to its end with `stdin`; its stdout, or the AppError its exit says. */
  private async simple(account: AccountRecord, rec: ServerRecord, script: string, args: string[], stdin = ''): Promise<Buffer> {
    const r = await this.run(account, rec, script, args);
    r.proc.stdin.end(stdin);
    const [out, err, f] = await Promise.all([collect(r.proc.stdout, 64 * 1024 * 1024), collect(r.proc.stderr, 4096), r.finished]);
    failure(f.info.code, err.data, args[0]);
    return out.data;
  }

  /** GET: the file's bytes (a Range of them when asked), streamed. */
  async read(account: AccountRecord, rec: ServerRecord, path: string, req: Req, res: Res): Promise<HandlerResult> {
    const asleep = rec.suspended ? undefined : this.d.sleepingRoot(rec.id);
    const fh = asleep ? await openFileIn(asleep, path) : undefined;
    if (fh) return this.readAsleep(fh, path, req, res);
    const size = Number((await this.simple(account, rec, S.stat, [path])).toString().trim());
    let [start, end] = [0, size - 1];
    const range = parseRange(req.headers.range, size);
    if (range === 'unsatisfiable')
      throw AppError.of('range_not_satisfiable', `the range lies outside the file (${size} bytes)`, { headers: { 'content-range': `bytes */${size}` } });
    if (range) [start, end] = range;
    const length = Math.max(0, end - start + 1);
    const headers = readHeaders(path, length);
    if (range) headers['content-range'] = `bytes ${start}-${end}/${size}`;
    return this.stream(account, rec, S.read, [path, String(start), String(length)], req, res, range ? 206 : 200, headers);
  }

  /** GET of a sleeping server's file reached without any symlink: read from its mounted disk
   *  without waking it (a path with a symlink goes through the server: it is woken). */
  private async readAsleep(fh: FileHandle, path: string, req: Req, res: Res): Promise<HandlerResult> {
    try {
      const size = (await fh.stat()).size;
      const range = parseRange(req.headers.range, size);
      if (range === 'unsatisfiable')
        throw AppError.of('range_not_satisfiable', `the range lies outside the file (${size} bytes)`, { headers: { 'content-range': `bytes */${size}` } });
      const [start, end] = range ?? [0, size - 1];
      const headers = readHeaders(path, Math.max(0, end - start + 1));
      if (range) headers['content-range'] = `bytes ${start}-${end}/${size}`;
      res.writeHead(range ? 206 : 200, headers);
      if (end < start) {
        res.end();
        await fh.close();
        return HANDLED;
      }
      const body = fh.createReadStream({ start, end, autoClose: true });
      whenClientLeaves(req, res, () => body.destroy());
      body.pipe(res as unknown as NodeJS.WritableStream);
      await new Promise<void>((resolve) => body.once('close', resolve));
      return HANDLED;
    } catch (e) {
      await fh.close().catch(() => {});
      throw e;
    }
  }

  /** GET archive=1: the directory as a tar (gzip when asked), streamed. */
  archive(account: AccountRecord, rec: ServerRecord, path: string, gzip: boolean, req: Req, res: Res): Promise<HandlerResult> {
    const name = `${posix.basename(path) || 'root'}.tar${gzip ? '.gz' : ''}`;
    const headers = {
      'content-type': gzip ? 'application/gzip' : 'application/x-tar',
      'content-disposition': `attachment; filename="${name.replace(/[^\w.-]/g, '_')}"`,
    };
    return this.stream(account, rec, S.pack, [path, gzip ? '-z' : ''], req, res, 200, headers);
  }

  /** Runs a script whose stdout is the answer: headers are sent with its first byte, or its failure is answered. */
  private async stream(
    account: AccountRecord,
    rec: ServerRecord,
    script: string,
    args: string[],
    req: Req,
    res: Res,
    status: number,
    headers: Record<string, string>,
  ): Promise<HandlerResult> {
    const r = await this.run(account, rec, script, args);
    r.proc.stdin.end();
    const err = collect(r.proc.stderr, 4096);
    whenClientLeaves(req, res, () => r.abort());
    const first = await new Promise<Buffer | null>((resolve) => {
      r.proc.stdout.once('data', (b: Buffer) => {
        r.proc.stdout.pause();
        resolve(b);
      });
      r.proc.stdout.once('end', () => resolve(null));
    });
    if (!first) {
      const f = await r.finished;
      failure(f.info.code, (await err).data, args[0]);
    }
    res.writeHead(status, headers);
    if (first) (res as unknown as NodeJS.WritableStream).write(first);
    r.proc.stdout.pipe(res);
    await r.finished;
    return HANDLED;
  }

  /** PUT: the request body becomes the file (parent directories made); its size. */
  async write(account: AccountRecord, rec: ServerRecord, path: string, mode: string | undefined, req: Req): Promise<z.infer<typeof Written>> {
    this.checkLength(req);
    const r = await this.run(account, rec, S.write, [path, mode ?? '']);
    const [out, err, over] = await Promise.all([collect(r.proc.stdout, 64), collect(r.proc.stderr, 4096), this.feed(req, r)]);
    const f = await r.finished;
    if (over) throw this.tooLarge();
    failure(f.info.code, err.data, path);
    return { path, size: Number(out.data.toString().trim()) };
  }

  /** POST archive: the request body (a tar, gzip or not) unpacked into the directory. */
  async unpack(account: AccountRecord, rec: ServerRecord, path: string, req: Req): Promise<void> {
    this.checkLength(req);
    const first = await firstChunk(req);
    const gzip = first.length >= 2 && first[0] === 0x1f && first[1] === 0x8b;
    const r = await this.run(account, rec, S.unpack, [path, gzip ? '-z' : '']);
    r.proc.stdin.write(first);
    const [, err, over] = await Promise.all([collect(r.proc.stdout, 0), collect(r.proc.stderr, 4096), this.feed(req, r, first.length)]);
    const f = await r.finished;
    if (over) throw this.tooLarge();
    if (f.info.code === 2 && !/No space left|Disk quota exceeded/.test(err.data.toString()))
      throw AppError.of('invalid_archive', 'the body is not a tar archive (optionally gzipped) that tar can unpack');
    failure(f.info.code, err.data, path);
  }

  async remove(account: AccountRecord, rec: ServerRecord, path: string): Promise<void> {
    await this.simple(account, rec, S.remove, [path]);
  }

  async list(account: AccountRecord, rec: ServerRecord, path: string): Promise<z.infer<typeof FileList>> {
    // one entry more than returned: whether there were more
    const r = await this.run(account, rec, S.list, [path, String((LIST_MAX + 1) * 5)]);
    r.proc.stdin.end();
    const [found, err, f] = await Promise.all([readEntries(r, LIST_MAX + 1), collect(r.proc.stderr, 4096), r.finished]);
    if (found.length <= LIST_MAX) failure(f.info.code, err.data, path); // else ended by readEntries
    const entries = found.slice(0, LIST_MAX);
    entries.sort((a, b) => (a.name < b.name ? -1 : 1));
    return { path, entries, truncated: found.length > LIST_MAX };
  }

  private checkLength(req: Req): void {
    const n = Number(req.headers['content-length']);
    if (Number.isFinite(n) && n > this.d.maxBody) throw this.tooLarge(n);
  }

  private tooLarge(n?: number): AppError {
    return AppError.of(
      'body_too_large',
      `${n === undefined ? 'the body is' : `the body is ${n} bytes,`} larger than this route accepts (${this.d.maxBody} bytes)`,
    );
  }

  /** Copies the request body into the command's stdin with back-pressure; true when it was too
   *  large (the command is then ended: its script removes what it wrote). */
  private feed(req: Req, r: Running, already = 0): Promise<boolean> {
    return new Promise((resolve) => {
      let size = already;
      const stdin = r.proc.stdin;
      if (req.readableEnded) {
        stdin.end();
        return resolve(false);
      }
      const onData = (b: Buffer) => {
        size += b.length;
        if (size > this.d.maxBody) {
          req.off('data', onData);
          req.resume();
          r.abort();
          stdin.destroy();
          return resolve(true);
        }
        if (!stdin.write(b)) {
          req.pause();
          stdin.once('drain', () => req.resume());
        }
      };
      req.on('data', onData);
      req.once('end', () => {
        stdin.end();
        resolve(false);
      });
      req.resume();
      req.once('error', () => {
        r.abort();
        stdin.destroy();
        resolve(false);
      });
      r.finished.then(
        () => resolve(false),
        () => resolve(false),
      );
    });
  }
}

/** The entries of the list script's output (5 NUL-ended fields each) as they come, at most
 *  `max`: what is read is parsed at once, nothing beyond the last whole entry is kept, and the
 *  command is ended (its output left unread) once `max` are there. */
function readEntries(r: Running, max: number): Promise<z.infer<typeof FileEntry>[]> {
  return new Promise((resolve) => {
    const entries: z.infer<typeof FileEntry>[] = [];
    let fields: string[] = [];
    let rest = Buffer.alloc(0);
    const out = r.proc.stdout;
    const onData = (chunk: Buffer) => {
      let b = rest.length ? Buffer.concat([rest, chunk]) : chunk;
      for (let nul = b.indexOf(0); nul >= 0 && entries.length < max; nul = b.indexOf(0)) {
        fields.push(b.subarray(0, nul).toString('utf8'));
        b = b.subarray(nul + 1);
        if (fields.length < 5) continue;
        const [name, size, mode, mtime, t] = fields;
        fields = [];
        entries.push({
          name,
          type: t === 'f' ? 'file' : t === 'd' ? 'dir' : t === 'l' ? 'symlink' : 'other',
          size: Number(size),
          mode,
          mtime: new Date(Number(mtime) * 1000).toISOString(),
        });
      }
      rest = Buffer.from(b); // a copy: the chunk it may point into is not kept
      if (entries.length >= max) {
        out.off('data', onData);
        out.resume();
        r.abort();
        done();
      }
    };
    const done = () => resolve(entries);
    out.on('data', onData);
    out.once('end', done);
    out.once('error', done);
  });
}

/** The AppError a script's exit status says (none for 0). */
function failure(code: number | null, stderr: Buffer, path: string | undefined): void {
  if (code === 0) return;
  const p = String(path ?? '').slice(0, 200);
  if (/No space left on device|Disk quota exceeded/.test(stderr.toString()))
    throw AppError.of('disk_full', `the server's disk is full (its ceiling is reached) while writing ${p}; delete files or move to a larger tier`);
  if (code === 13 || (code === 20 && /Read-only file system|Permission denied|Operation not permitted/.test(stderr.toString())))
    throw AppError.of(
      'path_not_writable',
      `nothing can be written at ${p}: its directory is read-only or a kernel file system (such as /proc or /sys), or writing there is not permitted`,
    );
  if (code === 44) throw AppError.of('file_not_found', `nothing at ${p} in the server`);
  if (code === 21) throw AppError.of('invalid_path', `${p} is a directory or not a regular file`);
  if (code === 20) throw AppError.of('invalid_path', `${p} (or a parent of it) is not a directory`);
  if (code === 28) throw AppError.of('disk_full', `the server's disk is full (its ceiling is reached) while writing ${p}`);
  throw AppError.of('invalid_path', `the operation on ${p} failed inside the server (status ${code ?? 'signal'})`);
}

function firstChunk(req: Req): Promise<Buffer> {
  return new Promise((resolve) => {
    const done = (b: Buffer) => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.pause();
      resolve(b);
    };
    const onData = (b: Buffer) => done(b);
    const onEnd = () => done(Buffer.alloc(0));
    req.on('data', onData);
    req.once('end', onEnd);
  });
}
