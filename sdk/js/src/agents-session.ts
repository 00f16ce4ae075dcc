// The sandbox session of rootbox/agents (see agents.ts): one rootbox server. It runs commands
// (exec; tty: true runs on a terminal inside the server over the exec WebSocket, agents-pty.ts),
// reads and writes files under the manifest's root, gives a port's URL, persists the workspace
// through a checkpoint (or as a tar) and hydrates it (agents-persist.ts), lets the server sleep
// (close with pauseOnExit) or deletes it.

import {
  Manifest,
  SandboxConfigurationError,
  SandboxProviderError,
  SandboxUnsupportedFeatureError,
  getRecordedExposedPortEndpoint,
  normalizeExposedPort,
  recordExposedPortEndpoint,
  type Entry,
  type ExecCommandArgs,
  type ExposedPortEndpoint,
  type ListDirectoryArgs,
  type MaterializeEntryArgs,
  type ReadFileArgs,
  type SandboxClientOptions,
  type SandboxDirectoryEntry,
  type SandboxExecResult,
  type SandboxSession,
  type SandboxSessionLifecycleOptions,
  type SandboxSessionState,
  type WorkspaceArchiveData,
  type WriteStdinArgs,
} from '@openai/agents-core/sandbox';
import { elapsedSeconds, formatExecResponse, shellQuote, truncateOutput } from '@openai/agents-core/sandbox/internal';
import { applyDiff, UserError, type Editor } from '@openai/agents-core';
import { posix } from 'node:path';
import { hydrate, persist, type Persisting, type WorkspacePersistence } from './agents-persist.js';
import { PtyProcesses, ptyCommand } from './agents-pty.js';
import { RootboxError } from './errors.js';
import type { Server } from './server.js';

export interface RootboxSandboxClientOptions extends SandboxClientOptions {
  /** The subdomain slug wanted for a new server. */
  slug?: string;
  /** Environment variables given to every command (beside the manifest's). */
  env?: Record<string, string>;
  /** Seconds before a command is killed (the API's default 60; at most the tier's maximum). */
  commandTimeout?: number;
  /** The ports resolveExposedPort may publish; without it any port may be. */
  exposedPorts?: number[];
  /** close() and a cleanup that preserves sessions leave the server to sleep instead of deleting it. */
  pauseOnExit?: boolean;
  /** true (the default): persistWorkspace checkpoints the server (and hydrateWorkspace restores or
   *  forks it), falling back to a tar of the workspace on a host without checkpoints;
   *  'checkpoint': only through checkpoints; 'tar': the workspace as a tar through the files API. */
  workspacePersistence?: WorkspacePersistence;
}

export interface RootboxSandboxSessionState extends SandboxSessionState {
  serverId: string;
  slug?: string;
  environment: Record<string, string>;
  commandTimeout?: number;
  configuredExposedPorts?: number[];
  pauseOnExit: boolean;
  workspacePersistence?: WorkspacePersistence;
}

export const PROVIDER = 'RootboxSandboxClient';
export const providerError = (what: string, e: unknown, details: Record<string, unknown> = {}) =>
  new SandboxProviderError(`${PROVIDER} failed to ${what}: ${e instanceof Error ? e.message : String(e)}`, {
    provider: 'rootbox',
    ...(e instanceof RootboxError ? { code: e.code, status: e.status } : {}),
    ...details,
  });

/** Output as the agents' tools show it: stdout, then stderr, each when not blank. */
const joined = (stdout: string, stderr: string) => [stdout, stderr].filter((s) => s.trim()).join('\n');

export class RootboxSandboxSession implements SandboxSession<RootboxSandboxSessionState> {
  readonly state: RootboxSandboxSessionState;
  /** The rootbox server behind the session (a hydrated checkpoint of another server moves it onto a fork). */
  server: Server;
  private readonly pty = new PtyProcesses();

  /** `open`: a handle on another server of the account by id (the client's), for hydrating a fork. */
  constructor(
    server: Server,
    state: RootboxSandboxSessionState,
    private readonly open?: (id: string) => Server,
  ) {
    this.server = server;
    this.state = state;
  }

  /** A path of the session: relative ones are under the manifest's root. */
  private path(p: string | undefined): string {
    const root = this.state.manifest.root;
    if (!p) return root;
    return posix.normalize(p.startsWith('/') ? p : posix.join(root, p));
  }

  private async run(cmd: string, workdir?: string, shell?: string, login?: boolean) {
    const command = shell ? [shell, login === false ? '-c' : '-lc', cmd] : cmd;
    try {
      return await this.server.exec(command, { cwd: this.path(workdir), env: this.state.environment, timeout: this.state.commandTimeout });
    } catch (e) {
      throw providerError('run a command', e, { serverId: this.state.serverId });
    }
  }

  private assertRunAs(runAs?: string): void {
    if (runAs && runAs !== 'root')
      throw new SandboxUnsupportedFeatureError(`${PROVIDER} runs everything as root: runAs is not supported.`, { provider: 'rootbox', feature: 'runAs' });
  }

  async exec(args: ExecCommandArgs): Promise<SandboxExecResult> {
    this.assertRunAs(args.runAs);
    const started = Date.now();
    const r = await this.run(args.cmd, args.workdir, args.shell, args.login);
    const stderr = r.timedOut ? `${r.stderr}${r.stderr && !r.stderr.endsWith('\n') ? '\n' : ''}(timed out)` : r.stderr;
    const out = truncateOutput(joined(r.stdout, stderr), args.maxOutputTokens);
    return {
      output: out.text,
      stdout: r.stdout,
      stderr,
      wallTimeSeconds: elapsedSeconds(started),
      exitCode: r.exitCode ?? (r.timedOut ? 124 : 1),
      originalTokenCount: out.originalTokenCount,
    };
  }

  async execCommand(args: ExecCommandArgs): Promise<string> {
    this.assertRunAs(args.runAs);
    if (args.tty) {
      try {
        return await this.pty.start(this.server, ptyCommand(args.cmd, args.shell, args.login), {
          cwd: this.path(args.workdir),
          env: this.state.environment,
          timeout: this.state.commandTimeout,
          yieldTimeMs: args.yieldTimeMs,
          maxOutputTokens: args.maxOutputTokens,
        });
      } catch (e) {
        throw providerError('start a terminal command', e, { serverId: this.state.serverId });
      }
    }
    const r = await this.exec(args);
    return formatExecResponse({ output: r.output, wallTimeSeconds: r.wallTimeSeconds, exitCode: r.exitCode, originalTokenCount: r.originalTokenCount });
  }

  async writeStdin(args: WriteStdinArgs): Promise<string> {
    return this.pty.write(args.sessionId, args.chars, { yieldTimeMs: args.yieldTimeMs, maxOutputTokens: args.maxOutputTokens });
  }

  supportsPty(): boolean {
    return true;
  }

  async running(): Promise<boolean> {
    try {
      return (await this.server.exec('true')).exitCode === 0;
    } catch {
      return false;
    }
  }

  async readFile(args: ReadFileArgs): Promise<Uint8Array> {
    this.assertRunAs(args.runAs);
    let bytes: Uint8Array;
    try {
      bytes = await this.server.files.read(this.path(args.path));
    } catch (e) {
      throw providerError(`read ${args.path}`, e, { path: args.path });
    }
    return typeof args.maxBytes === 'number' && bytes.byteLength > args.maxBytes ? bytes.subarray(0, args.maxBytes) : bytes;
  }

  async listDir(args: ListDirectoryArgs): Promise<SandboxDirectoryEntry[]> {
    this.assertRunAs(args.runAs);
    const dir = this.path(args.path);
    try {
      const { entries } = await this.server.files.list(dir);
      return entries.map((e) => ({ name: e.name, path: posix.join(dir, e.name), type: e.type === 'symlink' ? 'other' : e.type }));
    } catch (e) {
      throw providerError(`list ${args.path}`, e, { path: args.path });
    }
  }

  async pathExists(path: string): Promise<boolean> {
    return (await this.run(`test -e ${shellQuote(this.path(path))}`, '/')).exitCode === 0;
  }

  async directoryExists(path: string): Promise<boolean> {
    return (await this.run(`test -d ${shellQuote(this.path(path))}`, '/')).exitCode === 0;
  }

  /** The apply_patch editor (the filesystem capability): V4A diffs applied to files read and
   *  written through the files API. */
  createEditor(runAs?: string): Editor {
    this.assertRunAs(runAs);
    const read = async (p: string) => new TextDecoder().decode(await this.readFile({ path: p }));
    return {
      createFile: async (op) => {
        if (await this.pathExists(op.path)) throw new UserError(`Cannot create file because it already exists: ${op.path}`);
        await this.server.files.write(this.path(op.path), applyDiff('', op.diff, 'create'));
      },
      updateFile: async (op) => {
        const next = applyDiff(await read(op.path), op.diff);
        await this.server.files.write(this.path(op.moveTo ?? op.path), next);
        if (op.moveTo && this.path(op.moveTo) !== this.path(op.path)) await this.server.files.remove(this.path(op.path));
      },
      deleteFile: async (op) => {
        await this.server.files.remove(this.path(op.path));
      },
    };
  }

  /** Writes a manifest entry: a file, or a directory with its children. */
  async materializeEntry(args: MaterializeEntryArgs): Promise<void> {
    this.assertRunAs(args.runAs);
    await this.write(this.path(args.path), args.entry);
  }

  private async write(path: string, entry: Entry): Promise<void> {
    try {
      if (entry.type === 'file') await this.server.files.write(path, entry.content);
      else if (entry.type === 'dir') {
        const made = await this.server.exec(['mkdir', '-p', '--', path]);
        if (made.exitCode !== 0) throw new Error(made.stderr.trim());
        for (const [name, child] of Object.entries(entry.children ?? {})) await this.write(posix.join(path, name), child);
      } else
        throw new SandboxUnsupportedFeatureError(`${PROVIDER} materializes file and dir entries only, not ${entry.type}.`, {
          provider: 'rootbox',
          feature: `entry.${entry.type}`,
        });
    } catch (e) {
      if (e instanceof SandboxUnsupportedFeatureError) throw e;
      throw providerError(`write ${path}`, e, { path });
    }
  }

  /** Writes every entry of a manifest under its root. */
  async applyManifest(manifest: Manifest, runAs?: string): Promise<void> {
    this.assertRunAs(runAs);
    const made = await this.run(`mkdir -p -- ${shellQuote(manifest.root)}`, '/');
    if (made.exitCode !== 0) throw providerError('make the workspace root', new Error(made.stderr.trim()));
    for (const [path, entry] of Object.entries(manifest.entries))
      await this.write(posix.normalize(path.startsWith('/') ? path : posix.join(manifest.root, path)), entry);
  }

  /** The workspace, persisted through a checkpoint of the server (a short reference to it) or,
   *  with workspacePersistence 'tar' or on a host without checkpoints, as a tar (agents-persist.ts). */
  async persistWorkspace(): Promise<Uint8Array> {
    return persist(this.persisting());
  }

  /** Brings back a persisted workspace: a checkpoint of this server is restored (its whole disk);
   *  one of another server is forked and the session moves onto the fork (this server is deleted);
   *  a tar replaces the workspace's files. */
  async hydrateWorkspace(data: WorkspaceArchiveData): Promise<void> {
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data instanceof Uint8Array ? data : new Uint8Array(data);
    await hydrate(this.persisting(), bytes);
  }

  private persisting(): Persisting {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this;
    return {
      get server() {
        return self.server;
      },
      root: this.state.manifest.root,
      mode: this.state.workspacePersistence ?? true,
      open: (id) => {
        if (!this.open) throw new SandboxConfigurationError(`${PROVIDER} session has no client to reach server ${id}.`, { provider: 'rootbox' });
        return this.open(id);
      },
      moveTo: (server) => {
        this.server = server;
        this.state.serverId = server.id;
        this.state.slug = server.subdomain;
        this.state.exposedPorts = undefined; // the previous server's endpoints
      },
      quiesce: () => this.pty.terminateAll(),
    };
  }

  /** A port's public endpoint: port 80 is the server's own HTTPS address (its subdomain), any
   *  other is published with POST /expose on a public TCP port (plain, no TLS). */
  async resolveExposedPort(port: number): Promise<ExposedPortEndpoint> {
    const wanted = normalizeExposedPort(port);
    const allowed = this.state.configuredExposedPorts;
    if (allowed && !allowed.includes(wanted))
      throw new SandboxConfigurationError(`${PROVIDER} exposed port ${wanted} was not configured in exposedPorts.`, { provider: 'rootbox', port: wanted });
    const known = getRecordedExposedPortEndpoint(this.state, wanted);
    if (known) return known;
    let endpoint: ExposedPortEndpoint;
    try {
      if (wanted === 80) {
        const url = new URL(this.server.info ? this.server.url('/') : (await this.server.refresh(), this.server.url('/')));
        const tls = url.protocol === 'https:';
        endpoint = { host: url.hostname, port: url.port ? Number(url.port) : tls ? 443 : 80, tls, url: url.toString() };
      } else {
        const p = await this.server.expose(wanted);
        const at = p.public.lastIndexOf(':');
        endpoint = { host: p.public.slice(0, at), port: Number(p.public.slice(at + 1)), tls: false };
      }
    } catch (e) {
      throw providerError(`expose port ${wanted}`, e, { port: wanted });
    }
    return recordExposedPortEndpoint(this.state, endpoint, wanted);
  }

  /** Ends the terminal sessions; the server stays (and sleeps when idle). */
  async shutdown(): Promise<void> {
    this.pty.terminateAll();
  }

  /** Deletes the server, or, for a cleanup that preserves sessions with pauseOnExit, lets it sleep. */
  async delete(options?: SandboxSessionLifecycleOptions): Promise<void> {
    this.pty.terminateAll();
    if (options?.reason === 'cleanup' && options.preserveOwnedSessions === true && this.state.pauseOnExit) return;
    await this.kill();
  }

  /** With pauseOnExit the server is left to sleep; otherwise it is deleted. */
  async close(): Promise<void> {
    this.pty.terminateAll();
    if (!this.state.pauseOnExit) await this.kill();
  }

  /** Deletes the server (a server already gone is fine). */
  async kill(): Promise<void> {
    try {
      await this.server.delete();
    } catch (e) {
      if (!(e instanceof RootboxError && e.code === 'server_not_found')) throw providerError('delete the server', e, { serverId: this.state.serverId });
    }
  }
}
