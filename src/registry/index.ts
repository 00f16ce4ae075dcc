// The cluster registry (DESIGN part 6): shared records in PostgreSQL. This part connects, checks
// the schema, and keeps this host's row alive: registered at start, renewed every third of the
// lease, released on a clean stop. A registry that cannot be reached at start does not keep the
// host from serving what it has: it is checked and joined as soon as it answers; a registry with
// no schema or a newer one is refused (at start: the daemon does not start).

import { isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import { registryOptions, type ClusterSettings, type RegistryOptions } from './host.js';
import { HostDirectory, type HostFacts } from './hosts.js';
import { assertUsable } from './migrations.js';
import { RegistryAccounts } from './accounts.js';
import { RegistryLedger } from './ledger.js';
import { RegistryCa } from './ca.js';
import { RegistryNames } from './names.js';
import { WakeFence } from './fence.js';
import { RegistryPayments } from './payments.js';
import { PlacementCache } from './placements.js';
import { RegistryPool } from './pool.js';
import { RegistryShared } from './shared.js';
import { RegistryQuotas } from './quotas.js';
import { registryFacts, type RegistryFacts } from './report.js';

export { RegistryPool, redactUrl, isUnavailable } from './pool.js';
export { HostDirectory, type HostFacts, type HostRow } from './hosts.js';
export { registryChecks, type RegistryCheck } from './doctor.js';
export { registryFacts, clusterPlacements, clockSkew, type RegistryFacts, type PlacementRow } from './report.js';
export { RegistryNames, type Placement } from './names.js';
export { WakeFence, type FenceAnswer, type PlacementSource } from './fence.js';
export { RegistryPayments } from './payments.js';
export { PlacementCache, type PlacementView, type HostView, type PlacementCacheOptions } from './placements.js';
export { PLACEMENT_CHANNEL } from './placements-sql.js';
export { RegistryAccounts, clusterSecret, type SharedAccount, type SharedCode } from './accounts.js';
export { RegistryShared, keyedNames, type SharedCertificate, type ServerKey } from './shared.js';
export { RegistryQuotas, type ServerClaim } from './quotas.js';
export { RegistryLedger, type LedgerWrite, type AccountMoney, type LedgerRow } from './ledger.js';
export { RegistryCa, type CaPair } from './ca.js';
export { registryOptions, HOST_VERSION, type ClusterSettings, type RegistryOptions } from './host.js';
export { migrate, schemaVersion, assertUsable, KNOWN_VERSION, MIGRATIONS } from './migrations.js';

/** The registry part of the daemon: joined when cluster.registry is set, nothing on a single box. */
export async function startRegistry(d: { cfg: Readonly<ClusterSettings & { cluster: { registry?: string } }>; log: Logger }): Promise<Registry | undefined> {
  const url = d.cfg.cluster.registry;
  if (!url) return undefined;
  const r = new Registry(registryOptions(d.cfg, url), d.log.child({ part: 'registry' }));
  await r.start();
  return r;
}

export class Registry {
  readonly pool: RegistryPool;
  readonly hosts: HostDirectory;
  readonly names: RegistryNames;
  readonly payments: RegistryPayments;
  readonly ledger: RegistryLedger;
  readonly channel: RegistryCa;
  readonly placements: PlacementCache;
  readonly accounts: RegistryAccounts;
  readonly shared: RegistryShared;
  /** Limits counted across hosts: servers per account and address, running commands, request rates. */
  readonly quotas: RegistryQuotas;
  /** The wake fence: every start of a server on this host asks it first (main.ts gives it to the runtime). */
  readonly fence: WakeFence;
  private timer?: NodeJS.Timeout;
  private checked = false;
  private reachable = true;
  private beating?: Promise<void>;
  private measure?: () => Record<string, number>;
  private renewAgain = false;

  constructor(
    private readonly o: RegistryOptions,
    private readonly log: Logger,
  ) {
    this.pool = new RegistryPool({ url: o.url, connectTimeoutMs: o.connectTimeoutMs, statementTimeoutMs: o.statementTimeoutMs });
    this.hosts = new HostDirectory(this.pool, o.leaseMs);
    this.names = new RegistryNames(this.pool, o.host);
    this.payments = new RegistryPayments(this.pool, o.host);
    this.ledger = new RegistryLedger(this.pool, o.host);
    this.channel = new RegistryCa(this.pool);
    this.placements = new PlacementCache(
      this.pool,
      { refreshMs: Math.max(100, Math.min(1000, Math.floor(o.leaseMs / 3))), connectTimeoutMs: o.connectTimeoutMs },
      log,
    );
    this.accounts = new RegistryAccounts(this.pool, o.host);
    this.shared = new RegistryShared(this.pool, o.host);
    this.quotas = new RegistryQuotas(this.pool, o.host);
    this.fence = new WakeFence(o.host, this.names, log.child({ part: 'fence' }), () => this.up);
  }

  private facts(): HostFacts {
    // hosting's room carries free memory and disk too: the host's own measure only when it has none
    let room: Record<string, number> | undefined;
    try {
      room = this.measure?.();
    } catch (err) {
      this.log.warn('capacity not measured; the lease reports free memory and disk only', { detail: (err as Error).message });
    }
    return { name: this.o.host, advertise: this.o.advertise, publicIp: this.o.publicIp, version: this.o.version, capacity: room ?? this.o.capacity() };
  }

  /** What this host's lease reports as its capacity besides free memory and disk (hosting's
   *  room, counted from its servers' ceilings): read at every heartbeat from now on, the first
   *  one at once. */
  reportCapacity(measure: () => Record<string, number>): void {
    this.measure = measure;
    this.renew();
  }

  /** Checks the schema and registers this host. Refuses (throws) a registry without a usable
   *  schema; an unreachable one is logged and joined later. */
  async start(): Promise<void> {
    this.log.info('registry', { registry: this.pool.where, host: this.o.host, advertise: this.o.advertise });
    await this.beat(true).catch((err) => {
      if (!isAppError(err) || err.code !== 'registry_unavailable') throw err;
    });
    this.timer = setInterval(() => void this.tick(), Math.max(250, Math.floor(this.o.leaseMs / 3)));
    this.timer.unref();
    await this.placements.start();
  }

  private tick(): void {
    this.beating ??= this.beat(false)
      .catch((err) => {
        if (isAppError(err) && err.code === 'registry_unavailable') return;
        // a schema that became unusable (a newer rootbox migrated it): stop renewing, say why
        this.log.error('registry refused', { code: isAppError(err) ? err.code : undefined, detail: (err as Error).message });
        clearInterval(this.timer);
      })
      .finally(() => {
        this.beating = undefined;
        if (this.renewAgain) this.renew();
      });
  }

  /** Renews the lease now (after the one under way, which may have measured before the change):
   *  what this host can take changed, and the other hosts place creates by it. */
  renew(): void {
    this.renewAgain = this.beating !== undefined;
    if (this.timer && !this.beating) this.tick();
  }

  private async beat(starting: boolean): Promise<void> {
    try {
      if (!this.checked) {
        await assertUsable(this.pool);
        this.checked = true;
      }
      await this.hosts.heartbeat(this.facts(), starting || !this.reachable);
      if (!this.reachable) this.log.info('registry reachable again', { registry: this.pool.where });
      this.reachable = true;
    } catch (err) {
      if (isAppError(err) && err.code === 'registry_unavailable' && this.reachable) {
        this.reachable = false;
        this.log.warn('registry unreachable; serving what this host has', { registry: this.pool.where });
      }
      throw err;
    }
  }

  /** This host's name in the cluster. */
  get host(): string {
    return this.o.host;
  }

  /** The registry as this host sees it now (status): reachable, schema, lease, hosts up. */
  report(): Promise<RegistryFacts> {
    return registryFacts(this.pool, this.o.host, this.o.leaseMs);
  }

  /** Whether the last heartbeat reached the registry. */
  get up(): boolean {
    return this.reachable && this.checked;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.placements.stop();
    await this.beating;
    if (this.checked && this.reachable) await this.hosts.release(this.o.host).catch(() => {});
    await this.pool.end();
  }
}
