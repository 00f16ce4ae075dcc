// rootbox/agents: a sandbox provider for the OpenAI Agents SDK (@openai/agents-core 0.18), shaped
// like its E2B and Daytona providers. RootboxSandboxClient creates a rootbox server per sandbox
// session (or connects to one, or resumes a serialized session); the session (agents-session.ts)
// runs commands, with terminals over the exec WebSocket, moves files, gives a port's URL,
// persists and hydrates the workspace through checkpoints (restore, fork; a tar where the host has
// none, agents-persist.ts). Pausing is letting the server sleep (it sleeps for free when idle and
// wakes on the next call); delete removes it.

import {
  Manifest,
  SandboxConfigurationError,
  SandboxUnsupportedFeatureError,
  normalizeExposedPort,
  normalizeSandboxClientCreateArgs,
  type SandboxClient,
  type SandboxClientCreateArgs,
} from '@openai/agents-core/sandbox';
import {
  deserializeManifest,
  materializeEnvironment,
  rehydratePersistedEnvironmentForRuntime,
  serializeManifestRecord,
  serializeRuntimeEnvironmentForPersistence,
} from '@openai/agents-core/sandbox/internal';
import { PROVIDER, providerError, RootboxSandboxSession, type RootboxSandboxClientOptions, type RootboxSandboxSessionState } from './agents-session.js';
import { RootboxError } from './errors.js';
import { Rootbox, type RootboxOptions } from './index.js';
import type { Server } from './server.js';

export type { WorkspacePersistence } from './agents-persist.js';
export { RootboxSandboxSession, type RootboxSandboxClientOptions, type RootboxSandboxSessionState } from './agents-session.js';
/** The agents SDK's Manifest, re-exported for convenience (the same class). */
export { Manifest };

export type RootboxSandboxClientInit = RootboxOptions & RootboxSandboxClientOptions & { rootbox?: Rootbox };

export class RootboxSandboxClient implements SandboxClient<RootboxSandboxClientOptions, RootboxSandboxSessionState> {
  readonly backendId = 'rootbox';
  /** The API client (it keeps the key an anonymous create made). */
  readonly rootbox: Rootbox;
  private readonly options: RootboxSandboxClientOptions;

  constructor(init: RootboxSandboxClientInit = {}) {
    const { rootbox, baseUrl, apiKey, ca, maxRetries, maxRetryWait, ...options } = init;
    this.rootbox = rootbox ?? new Rootbox({ baseUrl, apiKey, ca, maxRetries, maxRetryWait });
    this.options = options;
  }

  private readonly open = (id: string) => this.rootbox.server(id);

  /** A new server with the manifest's entries written under its root. */
  async create(
    args?: SandboxClientCreateArgs<RootboxSandboxClientOptions> | Manifest,
    manifestOptions?: RootboxSandboxClientOptions,
  ): Promise<RootboxSandboxSession> {
    const a = normalizeSandboxClientCreateArgs(args, manifestOptions);
    if (a.snapshot && a.snapshot.type !== 'noop')
      throw new SandboxUnsupportedFeatureError(`${PROVIDER} does not support core sandbox snapshots: use persistWorkspace / hydrateWorkspace.`, {
        provider: 'rootbox',
        feature: 'snapshot',
      });
    const o = { ...this.options, ...a.options };
    if (o.workspacePersistence !== undefined && o.workspacePersistence !== true && o.workspacePersistence !== 'tar' && o.workspacePersistence !== 'checkpoint')
      throw new SandboxUnsupportedFeatureError(`${PROVIDER} workspacePersistence must be true, "checkpoint" or "tar".`, {
        provider: 'rootbox',
        feature: 'workspacePersistence',
      });
    const environment = await materializeEnvironment(a.manifest, o.env);
    let server: Server;
    try {
      server = await this.rootbox.create({ slug: o.slug });
    } catch (e) {
      throw providerError('create a server', e);
    }
    const session = new RootboxSandboxSession(
      server,
      {
        manifest: a.manifest,
        serverId: server.id,
        slug: server.subdomain,
        environment,
        commandTimeout: o.commandTimeout,
        configuredExposedPorts: o.exposedPorts?.map(normalizeExposedPort),
        pauseOnExit: o.pauseOnExit ?? false,
        workspacePersistence: o.workspacePersistence,
        workspaceReady: false,
      },
      this.open,
    );
    try {
      await session.applyManifest(a.manifest);
    } catch (e) {
      await session.kill().catch(() => {});
      throw e;
    }
    session.state.workspaceReady = true;
    return session;
  }

  /** A session on an existing server of the account (its workspace taken as it is). */
  async connect(serverId: string, manifest: Manifest = new Manifest(), options: RootboxSandboxClientOptions = {}): Promise<RootboxSandboxSession> {
    const o = { ...this.options, ...options };
    let server: Server;
    try {
      server = await this.rootbox.servers.get(serverId);
    } catch (e) {
      throw providerError('connect to the server', e, { serverId });
    }
    return new RootboxSandboxSession(
      server,
      {
        manifest,
        serverId,
        slug: server.subdomain,
        environment: await materializeEnvironment(manifest, o.env),
        commandTimeout: o.commandTimeout,
        configuredExposedPorts: o.exposedPorts?.map(normalizeExposedPort),
        pauseOnExit: o.pauseOnExit ?? false,
        workspacePersistence: o.workspacePersistence,
        workspaceReady: true,
      },
      this.open,
    );
  }

  async serializeSessionState(state: RootboxSandboxSessionState): Promise<Record<string, unknown>> {
    const runtime = Object.fromEntries(Object.entries(state.environment).filter(([k]) => !(k in state.manifest.environment)));
    return {
      ...state,
      manifest: serializeManifestRecord(state.manifest),
      environment: { ...runtime, ...serializeRuntimeEnvironmentForPersistence(state.manifest, state.environment) },
    };
  }

  async deserializeSessionState(state: Record<string, unknown>): Promise<RootboxSandboxSessionState> {
    if (typeof state.serverId !== 'string') throw new SandboxConfigurationError(`${PROVIDER} session state has no serverId.`, { provider: 'rootbox' });
    const manifest = deserializeManifest(state.manifest as Record<string, unknown>);
    const saved = (state.environment ?? {}) as Record<string, string>;
    const runtime = Object.fromEntries(Object.entries(saved).filter(([k]) => !(k in manifest.environment)));
    return {
      ...state,
      manifest,
      serverId: state.serverId,
      environment: { ...runtime, ...(await rehydratePersistedEnvironmentForRuntime(manifest, saved, this.options.env)) },
      pauseOnExit: state.pauseOnExit === true,
    } as RootboxSandboxSessionState;
  }

  canPersistOwnedSessionState(state: RootboxSandboxSessionState): boolean {
    return state.pauseOnExit;
  }

  /** Reconnects to the session's server (waking it if it slept); a server that is gone is made
   *  again from the state's manifest. */
  async resume(state: RootboxSandboxSessionState): Promise<RootboxSandboxSession> {
    try {
      return new RootboxSandboxSession(await this.rootbox.servers.get(state.serverId), state, this.open);
    } catch (e) {
      if (!(e instanceof RootboxError && e.code === 'server_not_found')) throw providerError('resume the server', e, { serverId: state.serverId });
    }
    const session = await this.create(
      { manifest: state.manifest },
      {
        env: state.environment,
        commandTimeout: state.commandTimeout,
        exposedPorts: state.configuredExposedPorts,
        pauseOnExit: state.pauseOnExit,
        workspacePersistence: state.workspacePersistence,
      },
    );
    return session;
  }

  /** Deletes the session's server. */
  async delete(state: RootboxSandboxSessionState): Promise<void> {
    await new RootboxSandboxSession(this.rootbox.server(state.serverId), state, this.open).kill();
  }
}
