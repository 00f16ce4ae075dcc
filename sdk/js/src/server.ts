// A server of the account: its commands (exec, as one JSON answer or streamed as NDJSON), files,
// URL, exposed ports, logs, checkpoints (restore, fork), restart and delete. Made by Rootbox.create / servers.get / server(id).

import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { RootboxError } from './errors.js';
import { spawnExec, type Process, type SpawnOptions } from './process.js';
import { cutOff, readAll, type Transport } from './http.js';
import type { Checkpoint, CheckpointList, Created, Restored, Domain, ExecResult, ExposedPort, FileList, Logs, ServerInfo, Written } from './types.js';
import { fromWire, toWire } from './wire.js';

export interface ExecOptions {
  /** Working directory (default /root). */
  cwd?: string;
  /** Variables added to the default environment. */
  env?: Record<string, string>;
  /** Seconds before the command and everything it started are killed (the API's default: 60). */
  timeout?: number;
  /** Text given to the command on standard input (then closed). */
  stdin?: string;
  /** Output as it comes (the call is then streamed as NDJSON and its output kept whole). */
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  /** Aborting ends the call, and the API kills the command (the call is streamed when a signal is given). */
  signal?: AbortSignal;
}

const enc = (s: string) => encodeURIComponent(s);

export class Files {
  constructor(
    private readonly t: Transport,
    private readonly id: string,
  ) {}

  private get at() {
    return `servers/${enc(this.id)}/files`;
  }

  /** A file's bytes. */
  async read(path: string): Promise<Uint8Array> {
    return readAll(await this.t.open('GET', this.at, { query: { path }, headers: { accept: '*/*' } }));
  }

  /** Writes a file whole (parent directories made); `mode` like '755'. */
  async write(path: string, data: string | Uint8Array | Readable, opts: { mode?: string } = {}): Promise<Written> {
    return fromWire(
      await this.t.json('PUT', this.at, { query: { path, mode: opts.mode }, body: data, headers: { 'content-type': 'application/octet-stream' } }),
    );
  }

  /** A directory's entries. */
  async list(path: string): Promise<FileList> {
    return fromWire(await this.t.json('GET', this.at, { query: { path, list: true } }));
  }

  /** Deletes a file or a directory with its contents. */
  async remove(path: string): Promise<void> {
    await this.t.json('DELETE', this.at, { query: { path } });
  }

  /** Unpacks a tar archive (gzipped or not) into the directory `path` (made when missing). */
  async upload(path: string, tar: Uint8Array | Readable): Promise<void> {
    await this.t.json('POST', `${this.at}/archive`, { query: { path }, body: tar, headers: { 'content-type': 'application/x-tar' } });
  }

  /** The directory `path` as a tar archive (gzipped with `gzip: true`). */
  async download(path: string, opts: { gzip?: boolean } = {}): Promise<Uint8Array> {
    return readAll(await this.t.open('GET', this.at, { query: { path, archive: true, gzip: opts.gzip }, headers: { accept: '*/*' } }));
  }
}

export class Domains {
  constructor(
    private readonly t: Transport,
    private readonly id: string,
  ) {}

  /** Attaches a domain of yours: the answer lists the DNS records to create. */
  async add(domain: string): Promise<Domain> {
    return fromWire(await this.t.json('POST', `servers/${enc(this.id)}/domains`, { json: toWire('DomainRequest', { domain }) }));
  }
  async list(): Promise<Domain[]> {
    return fromWire((await this.t.json<{ domains: unknown[] }>('GET', `servers/${enc(this.id)}/domains`)).domains);
  }
  /** Checks a pending domain's records now. */
  async check(domain: string): Promise<Domain> {
    return fromWire(await this.t.json('POST', `servers/${enc(this.id)}/domains/${enc(domain)}/check`));
  }
  async remove(domain: string): Promise<void> {
    await this.t.json('DELETE', `servers/${enc(this.id)}/domains/${enc(domain)}`);
  }
}

export class Server {
  readonly id: string;
  /** What the API last said of the server (undefined for a handle made by id alone). */
  info?: ServerInfo;
  readonly files: Files;
  readonly domains: Domains;
  private readonly ssh?: { command: string; privateKey: string };

  /** @internal made by Rootbox */
  constructor(
    private readonly t: Transport,
    id: string,
    info?: ServerInfo | Created,
  ) {
    this.id = id;
    this.files = new Files(t, id);
    this.domains = new Domains(t, id);
    if (info) {
      const { ssh, sshPrivateKey, apiKey: _k, subdomainNote: _s, accountNote: _a, ...rest } = info as Partial<Created> & ServerInfo;
      this.info = rest;
      if (ssh && sshPrivateKey) this.ssh = { command: ssh, privateKey: sshPrivateKey };
    }
  }

  /** The server's host name, `<slug>.<domain>`. */
  get subdomain(): string | undefined {
    return this.info?.subdomain;
  }

  /** Reads the server again (GET /servers/{id}). */
  async refresh(): Promise<ServerInfo> {
    this.info = fromWire(await this.t.json('GET', `servers/${enc(this.id)}`));
    return this.info as ServerInfo;
  }

  /** Runs a command (a string through /bin/sh -c, an array as argv) to its end. */
  async exec(command: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const json = toWire('ExecRequest', { command, cwd: opts.cwd, env: opts.env, stdin: opts.stdin, timeout: opts.timeout });
    const path = `servers/${enc(this.id)}/exec`;
    // streamed when output is wanted as it comes, or when the call may be aborted: the API kills
    // the command of a streaming client that leaves (a JSON answer's command runs to its end)
    if (!opts.onStdout && !opts.onStderr && !opts.signal) return fromWire(await this.t.json('POST', path, { json }));
    const res = await this.t.open('POST', path, { json, signal: opts.signal, headers: { accept: 'application/x-ndjson' } });
    const out = { stdout: [] as string[], stderr: [] as string[] };
    let exit: Record<string, unknown> | undefined;
    const text = new StringDecoder('utf8');
    let rest = '';
    const line = (l: string) => {
      if (!l) return;
      const o = JSON.parse(l) as { stream?: 'stdout' | 'stderr'; data?: string } & Record<string, unknown>;
      if (o.stream && typeof o.data === 'string') {
        out[o.stream].push(o.data);
        (o.stream === 'stdout' ? opts.onStdout : opts.onStderr)?.(o.data);
      } else if ('exit_code' in o) exit = o;
      else if (typeof o.error === 'string') throw new RootboxError({ status: 200, code: o.error, detail: String(o.detail ?? ''), body: o });
    };
    await new Promise<void>((resolve, reject) => {
      res.on('data', (b: Buffer) => {
        try {
          const lines = (rest + text.write(b)).split('\n');
          rest = lines.pop() ?? '';
          for (const l of lines) line(l);
        } catch (e) {
          res.destroy();
          reject(e);
        }
      });
      res.on('end', () => {
        try {
          line(rest + text.end());
          resolve();
        } catch (e) {
          reject(e);
        }
      });
      res.on('error', reject);
      res.on('close', () => res.complete || reject(opts.signal?.aborted ? opts.signal.reason : cutOff()));
    });
    if (!exit) throw new RootboxError({ status: 200, code: 'connection_failed', detail: 'the exec stream ended before the exit line' });
    const e = fromWire<Omit<ExecResult, 'stdout' | 'stderr' | 'truncated'>>(exit);
    return {
      exitCode: e.exitCode,
      signal: e.signal,
      stdout: out.stdout.join(''),
      stderr: out.stderr.join(''),
      truncated: false,
      timedOut: e.timedOut,
      ms: e.ms,
    };
  }

  /** Starts a command over the exec WebSocket: its stdin stays open (Process.write, end) and its
   *  output comes as it is written; Process.wait() answers how it ended. Needs the ws package. */
  spawn(command: string | string[], opts: SpawnOptions = {}): Promise<Process> {
    return spawnExec(this.t, `servers/${enc(this.id)}/exec`, command, opts);
  }

  /** The server's HTTPS (or HTTP) address: its subdomain, on the scheme and port of the API's base URL. */
  url(path = '/'): string {
    if (!this.info) throw new TypeError('url() needs the server read first (servers.get or refresh)');
    const port = this.t.base.port ? `:${this.t.base.port}` : '';
    return `${this.t.base.protocol}//${this.info.subdomain}${port}${path.startsWith('/') ? path : `/${path}`}`;
  }

  /** Publishes a TCP port of the server on a public port. */
  async expose(port: number): Promise<ExposedPort> {
    return fromWire(await this.t.json('POST', 'expose', { json: toWire('ExposeRequest', { server: this.id, port }) }));
  }
  /** Stops publishing a TCP port. */
  async unexpose(port: number): Promise<void> {
    await this.t.json('DELETE', 'expose', { json: toWire('ExposeRequest', { server: this.id, port }) });
  }

  /** run.sh's last lines, the supervisor's events and OOM kills (never wakes the server). */
  async logs(opts: { tail?: number } = {}): Promise<Logs> {
    return fromWire(await this.t.json('GET', `servers/${enc(this.id)}/logs`, { query: { tail: opts.tail } }));
  }

  async restart(): Promise<ServerInfo> {
    this.info = fromWire(await this.t.json('POST', `servers/${enc(this.id)}/restart`));
    return this.info as ServerInfo;
  }

  /** Checkpoints the server now: a point-in-time copy of its disk and settings (memory is not
   *  kept; a running server keeps running, a sleeping one is not woken). */
  async checkpoint(opts: { comment?: string } = {}): Promise<Checkpoint> {
    return fromWire(await this.t.json('POST', `servers/${enc(this.id)}/checkpoints`, { json: toWire('CheckpointRequest', opts) }));
  }
  /** The server's checkpoints, newest first (manual and automatic ones). */
  async checkpoints(): Promise<Checkpoint[]> {
    return fromWire<CheckpointList>(await this.t.json('GET', `servers/${enc(this.id)}/checkpoints`)).checkpoints;
  }
  async deleteCheckpoint(checkpoint: string): Promise<void> {
    await this.t.json('DELETE', `servers/${enc(this.id)}/checkpoints/${enc(checkpoint)}`);
  }
  /** Makes the server's disk that of one of its checkpoints (it restarts; files written since
   *  are lost). Answers the checkpoint restored. */
  async restore(checkpoint: string): Promise<Checkpoint> {
    return fromWire<Restored>(await this.t.json('POST', `servers/${enc(this.id)}/restore`, { json: toWire('RestoreRequest', { checkpoint }) })).checkpoint;
  }
  /** A new server of the account from a checkpoint of this one (default: one taken now), with its
   *  own id, subdomain and SSH key pair (as create() gives them); the two are independent. */
  async fork(opts: { checkpoint?: string; slug?: string } = {}): Promise<Server> {
    const created = fromWire<Created>(await this.t.json('POST', `servers/${enc(this.id)}/fork`, { json: toWire('ForkRequest', opts) }));
    return new Server(this.t, created.id, created);
  }

  /** Deletes the server and everything it held. */
  async delete(): Promise<void> {
    await this.t.json('DELETE', `servers/${enc(this.id)}`);
  }

  /** The `ssh` command line POST /create answered (with the private key at ~/.ssh/<id>). */
  sshCommand(): string {
    if (!this.ssh) throw new TypeError('the SSH command and key are given only by create(): this server was not created by this client');
    return this.ssh.command;
  }
  /** The server's SSH private key (OpenSSH PEM), given only by create(). */
  get sshPrivateKey(): string | undefined {
    return this.ssh?.privateKey;
  }
}
