// The hosting API's services wired together once: accounts, phone verification, servers and
// exposed ports, and keeping servers' ceilings in line with their account's tier (registered
// with billing as its tier keeper). Built by createHostingService (service.ts) from its
// dependencies; start() reopens stored exposures and applies stored tiers. What it keeps in line
// with the registry in cluster mode (servers' settings, the start's reconcile, stale copies) is
// registrysync.ts.

import type { Billing } from '../billing/index.js';
import type { Checkpoints } from '../checkpoints/index.js';
import type { Config } from '../config/index.js';
import { Domains, dnsLookup, type CertIssuer, type SharedDomains } from '../domains/index.js';
import type { Paywall } from '../payments/index.js';
import type { Logger } from '../log/index.js';
import { MissBudget } from '../misses.js';
import type { Presence, PresenceState } from '../presence/index.js';
import type { Runtime } from '../runtime/index.js';
import type { SmsSender } from '../sms/index.js';
import type { AccountRecord, Store } from '../store/index.js';
import { Accounts, TIER_LIMITS, tierOf } from './accounts.js';
import { Exposures, type PortListener } from './expose.js';
import { ClusterSecret, HostSecret, type KeySecret } from './keys.js';
import { LocalAccounts, RegistryAccountBook, type AccountBook, type SharedAccounts } from './directory.js';
import { PhoneVerifier } from './phone.js';
import { netDiffers, Servers, type Credits, type KeyPair, type SharedNames } from './servers.js';
import { Commands } from './commands.js';
import { Unavailable, type PlacementsToShow } from './unavailable.js';
import type { ExecSettings } from './exec.js';
import { Files } from './files.js';
import { CommandBudget } from './slots.js';
import { measureCapacity, type Capacity } from './capacity.js';
import type { HostChoice } from './hostchoice.js';
import type { SharedQuotas } from './quotas.js';
import { ServerCheckpoints } from './checkpoints.js';
import { AutoCheckpoints } from './autocheckpoints.js';
import { registrySync, settingsWriter } from './registrysync.js';
import { systemClock, type Clock } from '../clock.js';

export interface HostingDeps {
  cfg: Readonly<Config>;
  log: Logger;
  store: Store;
  runtime: Runtime;
  /** The truthful state of a server (waking while a wake is under way). */
  presence: Presence & PresenceState;
  /** A slot of the server's command budget shared with SSH (SshServer.takeServerSlot), or why
   *  there is none; absent: HTTP commands are counted per server on their own (same ceiling). */
  serverSlot?(serverId: string): (() => void) | string;
  sms: SmsSender;
  ports: PortListener;
  makeKeyPair(comment: string): KeyPair;
  billing: Billing;
  /** x402 paywall for recharges; absent or unconfigured → 503 not_configured. */
  paywall?: Paywall;
  /** The SSH port clients should use (the bound port when configured as 0). */
  sshPort(): number;
  /** Forgets a deleted server outside the runtime (idle tracking, the proxy's caches). */
  forget?(serverId: string): void;
  /** Certificates for servers' own domains (ACME); absent: custom domains are refused (503). */
  certs?: CertIssuer;
  /** Registry mode: slugs and placements shared by every host. */
  names?: SharedNames;
  /** Registry mode: accounts, SMS codes and the cluster secret shared by every host. */
  sharedAccounts?: SharedAccounts & { secret(): Promise<Buffer> };
  /** Registry mode: custom domains unique across every host. */
  sharedDomains?: SharedDomains;
  /** Registry mode: where every server runs and which hosts are down (the placement cache). */
  placements?: PlacementsToShow;
  /** Clock of the phone codes' time windows and the request-rate buckets (tests move it; default Date.now). */
  now?: () => number;
  /** Registry mode: the other hosts a create goes to when this one has no room (hostchoice.ts). */
  hostChoice?: HostChoice;
  /** Registry mode: the limits counted across hosts (servers, running commands, request rates). */
  quotas?: SharedQuotas;
  /** Checkpoints of servers' disks (src/checkpoints); absent: the checkpoint routes answer 503. */
  checkpoints?: Checkpoints;
  /** Tells when the idle tracker put a server to sleep (its automatic checkpoint). */
  sleeps?: { onSleep(fn: (id: string) => void): void };
  /** The timers of automatic checkpoints and the API's wait for another host's part of a server list (default: the system clock). */
  clock?: Clock;
}

export interface HostingCore {
  cfg: Readonly<Config>;
  log: Logger;
  store: Store;
  accounts: Accounts;
  /** What api keys and server ids no cache knows may cost in registry reads, per source (cluster mode). */
  misses: MissBudget;
  phone: PhoneVerifier;
  servers: Servers;
  /** Servers of other hosts that are down, shown `unavailable` (cluster mode). */
  unavailable: Unavailable;
  exposures: Exposures;
  /** Commands run in servers for the HTTP API (exec, files), with their caps. */
  commands: Commands;
  files: Files;
  /** Checkpoints, restore and fork of servers (checkpoints.ts); absent where none are kept. */
  checkpoints?: ServerCheckpoints;
  /** Automatic checkpoints at sleep and on the interval, retention, collection (autocheckpoints.ts). */
  autoCheckpoints?: AutoCheckpoints;
  execSettings: ExecSettings;
  /** Servers' own domains; the edge routes an active one with domains.slugOf. */
  domains: Domains;
  credits(account: AccountRecord): Credits;
  /** The account's balance and usage as every host metered them (cluster mode: read from the
   *  registry into this host's cache first), for the views that show money. */
  freshCredits(account: AccountRecord): Promise<Credits>;
  /** 402 with the upgrade envelope when the account's grant is used up and it has no credit. */
  assertNotExhausted(account: AccountRecord, baseUrl: string, more?: Record<string, unknown>): void;
  /** Raises the ceilings of servers that lag behind their account's tier (daemon start, each
   *  billing pass); returns how many accounts were brought up to date. */
  syncTiers(): Promise<number>;
  sshPort(): number;
  /** What this host can still take (capacity.ts): checked at each create, reported in its lease. */
  capacity(): Capacity;
  hostChoice?: HostChoice;
  /** Reopens the stored exposed ports and applies stored tiers (e.g. credit added while stopped). */
  start(): Promise<void>;
  /** Registry mode, once the registry answered this host's start (main.ts, after the edge and SSH
   *  listen): its placements and slugs made to match the store, this host's earlier reservations released. */
  join(skip?: (id: string) => boolean): Promise<void>;
  /** Registry mode: server `id`'s settings (never_sleep, exposed ports, suspension) kept to be
   *  written where a recovery on another host reads them, after a change of one of them (written
   *  off the answer's path, again until the registry takes it). */
  settingsChanged(id: string): void;
  /** Registry mode, when this host reaches the registry again after fencing itself, or when the
   *  placement cache shows `only` placed on another host (main.ts): its copies of servers the
   *  registry placed on another host are removed (stalecopies.ts); false: the registry did not answer.
   *  `skip`: servers another part removes itself (a move's outcome being settled: moves/asked.ts). */
  dropMoved(only?: readonly string[], skip?: (id: string) => boolean): Promise<boolean>;
  /** Registry mode: this host's running servers the placement cache shows on another host. */
  placedAway(): string[];
}

export function buildCore(d: HostingDeps): HostingCore {
  const secret = new HostSecret(d.cfg.dataDir);
  const shared = d.sharedAccounts;
  const misses = new MissBudget();
  const book: AccountBook = shared ? new RegistryAccountBook(shared, d.store, misses) : new LocalAccounts(d.store);
  const keySecret: KeySecret = shared ? new ClusterSecret(() => shared.secret()) : secret;
  if (keySecret.ready) void keySecret.ready().catch(() => {}); // read at start; again on first need if the registry is away
  const dc = d.cfg.hosting.domains;
  const domains = new Domains({
    settings: {
      domain: d.cfg.domain,
      publicIp: d.cfg.publicIp,
      limits: dc.limits,
      attemptsPerHour: dc.attemptsPerHour,
      checkInterval: dc.checkInterval,
      pendingTimeout: dc.pendingTimeout,
    },
    store: d.store,
    dns: dnsLookup(dc.resolver),
    certs: d.certs ?? { configured: false, issue: async () => {}, remove: async () => {}, validity: () => undefined },
    mac: (v) => secret.mac(v),
    log: d.log.child({ part: 'domains' }),
    shared: d.sharedDomains,
  });
  // registry mode: each change of a server's settings written where a recovery reads it (registrysync.ts)
  const settingsChanged = settingsWriter(d);
  const exposures = new Exposures(d.store, d.ports, d.cfg.hosting.portPool, d.cfg.publicIp, d.cfg.hosting.portLimits, settingsChanged);
  const checkpoints =
    d.checkpoints &&
    new ServerCheckpoints(d.store, d.runtime, d.checkpoints, d.cfg.checkpoints.manualPerServer, {
      // placed on some host (any host's, lost or not): the registry has its placement, not only its tombstone
      placed: d.names?.placementOf && (async (id) => typeof (await d.names!.placementOf!(id)) === 'object'),
      epochOf: d.names?.epochOf && ((id) => d.names!.epochOf!(id)),
      changed: (id, accountId) => d.billing.checkpointsChanged(id, accountId),
    });
  const servers = new Servers({
    store: d.store,
    runtime: d.runtime,
    log: d.log,
    domain: d.cfg.domain,
    brands: new Set(d.cfg.hosting.brandSlugs),
    maxServersPerAccount: d.cfg.hosting.maxServersPerAccount,
    anonServersPerIp: d.cfg.hosting.anonServersPerIp,
    quotas: d.quotas,
    makeKeyPair: d.makeKeyPair,
    credits: (a) => d.billing.credits(a),
    exposedPorts: (id) => exposures.list(id),
    release: async (id) => {
      await exposures.releaseServer(id);
      await domains.releaseServer(id);
      await checkpoints?.forgetServer(id, d.log);
      d.forget?.(id);
    },
    stateOf: (id) => d.presence.state(id),
    domainsOf: (id) => domains.activeOf(id),
    names: d.names,
    forgetAccount: shared && ((id) => book.forget(id)),
    publicIp: d.cfg.publicIp,
    flowBounds: d.cfg.runtime.egress,
  });
  const sync = () => syncTiers(d, servers);
  const ec = d.cfg.hosting.exec;
  const own = new CommandBudget(d.cfg.ssh.maxExecsPerServer);
  const commands = new Commands({
    runtime: d.runtime,
    presence: d.presence,
    log: d.log.child({ part: 'exec' }),
    current: (id) => d.store.servers.get(id),
    serverSlot: d.serverSlot ?? ((id) => own.take(id)),
    maxPerAccount: ec.maxPerAccount,
    shared: d.quotas,
    killGraceMs: ec.killGrace,
  });
  const execSettings: ExecSettings = { outputMax: ec.outputMax, timeoutMax: ec.timeoutMax };
  const auto =
    checkpoints &&
    new AutoCheckpoints({
      store: d.store,
      runtime: d.runtime,
      checkpoints,
      log: d.log.child({ part: 'checkpoints' }),
      clock: d.clock ?? systemClock,
      settings: d.cfg.checkpoints,
    });
  d.billing.keepTiers({ apply: (a) => servers.applyTier(a), sync });
  return {
    cfg: d.cfg,
    log: d.log,
    store: d.store,
    settingsChanged,
    accounts: new Accounts(d.store, keySecret, book),
    misses,
    phone: new PhoneVerifier(book, keySecret, d.sms, d.now),
    servers,
    unavailable: new Unavailable({
      placements: d.placements,
      domain: d.cfg.domain,
      credits: (a) => d.billing.credits(a),
      local: (id) => d.store.servers.get(id) !== undefined,
    }),
    exposures,
    commands,
    files: new Files({
      commands,
      sleepingRoot: (id) => (d.presence.state(id) === 'sleeping' ? d.runtime.get(id)?.rootfs : undefined),
      settings: execSettings,
      maxBody: d.cfg.hosting.files.maxBody,
    }),
    execSettings,
    checkpoints,
    autoCheckpoints: auto,
    domains,
    credits: (a) => d.billing.credits(a),
    freshCredits: async (a) => (await d.billing.book.refresh(a.id), d.billing.credits(a)),
    assertNotExhausted: (a, baseUrl, more) => d.billing.assertNotExhausted(a, baseUrl, more),
    syncTiers: sync,
    sshPort: d.sshPort,
    capacity: () => measureCapacity(d.cfg, d.store.servers.all({ withPending: true })),
    hostChoice: d.hostChoice,
    ...registrySync(d, { servers, exposures, checkpoints }),
    async start() {
      await exposures.restore((msg, f) => d.log.warn(msg, f));
      domains.load();
      domains.start();
      if (auto) {
        d.sleeps?.onSleep((id) => auto.slept(id));
        auto.start();
      }
      await sync();
    },
  };
}

/** A server lags when its RAM or disk ceiling is below its account's tier (a credit the daemon
 *  was not told about, or a raise a crash interrupted), or its connection bounds are not its
 *  tier's (the same, or runtime.egress changed). Ceilings above the tier are left alone:
 *  lowering a running cgroup under its usage would fail or kill processes. */
async function syncTiers(d: HostingDeps, servers: Servers): Promise<number> {
  let n = 0;
  for (const account of d.store.accounts.all()) {
    const want = TIER_LIMITS[tierOf(account)];
    const net = servers.netOf(account);
    const lagging = servers
      .list(account)
      .filter((s) => d.runtime.get(s.id) && (s.memoryBytes < want.memoryBytes || s.diskBytes < want.diskBytes || netDiffers(d.runtime.get(s.id)?.net, net)));
    if (!lagging.length) continue;
    try {
      await servers.applyTier(account);
      n++;
      d.log.info('tier ceilings applied', { account: account.id, tier: tierOf(account), servers: lagging.map((s) => s.id) });
    } catch (e) {
      d.log.warn('applying tier ceilings failed; retried at the next pass', { account: account.id, err: (e as Error).message });
    }
  }
  return n;
}
