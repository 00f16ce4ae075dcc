// This host's registry (index.ts is the module's surface and says what it owns): startRegistry
// connects, checks the schema and the cluster token, claims the host's name, and keeps its row
// alive; Registry holds the registry's parts this host uses.

import { AppError, isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import { registryOptions, type ClusterSettings, type RegistryOptions } from './host.js';
import { HostDirectory, type HostFacts } from './hosts.js';
import { HostDrains } from './drains.js';
import { assertUsable } from './migrations.js';
import { claimName, newIdentity, type HostIdentity } from './identity.js';
import { RegistryAccounts } from './accounts.js';
import { RegistryLedger } from './ledger.js';
import { RegistryCa, RegistryEdgeCa } from './ca.js';
import { RegistryNames } from './names.js';
import { WakeFence } from './fence.js';
import { RegistryPayments } from './payments.js';
import { PlacementCache } from './placements.js';
import { RegistryPool } from './pool.js';
import { RegistryShared } from './shared.js';
import { RegistrySettings } from './settings.js';
import { SettingsWriter } from './settingswriter.js';
import { RegistryQuotas } from './quotas.js';
import { registryFacts, type RegistryFacts } from './report.js';
import { checkToken, sealClear } from './token.js';
import { joinRegistry, type BoxRecords, type JoinReport } from './join.js';
import { Contact, savedContact } from './contact.js';
import { assertNotCutOff, SelfFence, type FencedServers } from './selffence.js';
import { FenceSettlement, fenceStateFile } from './fencestate.js';
import { AskedMoves, askedDir } from './asked.js';
import type { Clock } from '../clock.js';

/** The registry part of the daemon: joined when cluster.registry is set, nothing on a single box.
 *  Returns before any round trip: the registry's answer to this start is `ready`. */
export async function startRegistry(d: { cfg: Readonly<ClusterSettings & { cluster: { registry?: string } }>; log: Logger }): Promise<Registry | undefined> {
  const url = d.cfg.cluster.registry;
  if (!url) return undefined;
  const r = new Registry(registryOptions(d.cfg, url), d.log.child({ part: 'registry' }));
  void r.start(); // no round trip awaited: `ready` says how it went (main.ts awaits it once the edge and SSH listen)
  return r;
}

/** How often a host heartbeats: a third of its lease (at least 250 ms). */
const beatEvery = (leaseMs: number) => Math.max(250, Math.floor(leaseMs / 3));

export class Registry {
  readonly pool: RegistryPool;
  readonly hosts: HostDirectory;
  /** Drain marks and progress in the hosts' rows (moves/drain.ts runs a drain of this host). */
  readonly drains: HostDrains;
  readonly names: RegistryNames;
  readonly payments: RegistryPayments;
  readonly ledger: RegistryLedger;
  readonly channel: RegistryCa;
  /** The edge CA every host's default HTTPS certificate chains to (main.ts gives it to the TLS part). */
  readonly edgeCa: RegistryEdgeCa;
  readonly placements: PlacementCache;
  readonly accounts: RegistryAccounts;
  readonly shared: RegistryShared;
  /** Limits counted across hosts: servers per account and address, running commands, request rates. */
  readonly quotas: RegistryQuotas;
  /** The wake fence: every start of a server on this host asks it first (main.ts gives it to the runtime). */
  readonly fence: WakeFence;
  /** This host's instance (its data dir's id) and run, and whether the run holds the name. */
  readonly identity: HostIdentity;
  /** This host's contact with the registry and every peer over time: who is dead, whether this host is cut off (issue 38). */
  readonly contact: Contact;
  /** This host's writes of its servers' settings rows (retried at each heartbeat that reached the registry). */
  readonly settings: SettingsWriter;
  /** The self-fence, once main.ts gave it this host's servers (`fenceServers`). */
  selfFence?: SelfFence;
  /** Whether the self-fence's stop (or the watchdog's) is settled, read from the data dir at once:
   *  the wake fence asks it from the boot's first start on, before the self-fence runs. */
  readonly settlement: FenceSettlement;
  /** The servers this host asked another host to take, the outcome not known yet (asked.ts), read
   *  from the data dir at once: the wake fence asks it from the boot's first start on. */
  readonly asked: AskedMoves;
  private timer?: NodeJS.Timeout;
  private checked = false;
  private reachable = true;
  /** When (monotonic ms) the last heartbeat that reached the registry started (the self-fence's contact). */
  private reachedAt?: number;
  private beating?: Promise<void>;
  private measure?: () => Record<string, number>;
  private renewAgain = false;

  constructor(
    private readonly o: RegistryOptions,
    private readonly log: Logger,
  ) {
    this.identity = newIdentity(o.dataDir);
    this.pool = new RegistryPool({ url: o.url, connectTimeoutMs: o.connectTimeoutMs, statementTimeoutMs: o.statementTimeoutMs });
    this.hosts = new HostDirectory(this.pool, o.leaseMs);
    this.drains = new HostDrains(this.pool);
    this.names = new RegistryNames(this.pool, o.host, this.identity);
    this.settings = new SettingsWriter(new RegistrySettings(this.pool, o.host, this.identity), log.child({ part: 'settings' }));
    this.payments = new RegistryPayments(this.pool, o.host);
    this.ledger = new RegistryLedger(this.pool, o.host);
    this.channel = new RegistryCa(this.pool, o.keys);
    this.edgeCa = new RegistryEdgeCa(this.pool, o.keys);
    this.placements = new PlacementCache(
      this.pool,
      {
        refreshMs: Math.max(100, Math.min(1000, Math.floor(o.leaseMs / 3))),
        connectTimeoutMs: o.connectTimeoutMs,
        leaseMs: o.leaseMs,
        host: o.host,
        tombstoneRetentionMs: o.tombstoneRetentionMs,
      },
      log,
    );
    this.accounts = new RegistryAccounts(this.pool, o.host, this.placements, o.keys);
    this.shared = new RegistryShared(this.pool, o.host, o.keys);
    this.quotas = new RegistryQuotas(this.pool, o.host);
    this.contact = new Contact({
      self: o.host,
      hosts: () => this.placements.hosts(),
      registryUp: () => this.reachable,
      registryReachedAt: () => this.reachedAt,
      leaseMs: o.leaseMs,
      now: () => performance.now(),
      recoverAfterMs: o.recoverAfterMs ?? 0,
      saved: savedContact(o.dataDir),
    });
    this.settlement = new FenceSettlement(fenceStateFile(o.dataDir), (what, err) => log.error(what, { err }));
    if (this.settlement.unsettled)
      log.warn("this host fenced itself before its restart and has not read its servers' placements since: no start or thaw without them", {
        since: new Date(this.settlement.since!.since).toISOString(),
        by: this.settlement.since!.by ?? 'fence',
      });
    this.asked = new AskedMoves(askedDir(o.dataDir), (what, err) => log.error(what, { err }));
    if (this.asked.list().length)
      log.warn('servers this host asked another host to take before its restart, the outcome unknown: none starts here before the registry says', {
        servers: this.asked.list(),
      });
    // a run that reached the registry but does not hold its name (refused, or taken over) starts nothing
    this.fence = new WakeFence(
      o.host,
      this.names,
      log.child({ part: 'fence' }),
      () => (!this.reachable || !this.checked ? 'down' : this.identity.held ? 'held' : 'not-held'),
      (id) => assertNotCutOff(this.contact, o.recoverAfterMs ?? 0, log.child({ part: 'selffence' }), id),
      () => this.settlement.unsettled,
      this.asked,
    );
  }

  private facts(): HostFacts {
    // hosting's room carries free memory and disk too: the host's own measure only when it has none
    let room: Record<string, number> | undefined;
    try {
      room = this.measure?.();
    } catch (err) {
      this.log.warn('capacity not measured; the lease reports free memory and disk only', { detail: (err as Error).message });
    }
    return {
      name: this.o.host,
      advertise: this.o.advertise,
      publicIp: this.o.publicIp,
      version: this.o.version,
      capacity: room ?? this.o.capacity(),
      heard: this.contact.heardAgo(),
    };
  }

  /** What this host's lease reports as its capacity besides free memory and disk (hosting's
   *  room, counted from its servers' ceilings): read at every heartbeat from now on, the first
   *  one at once. */
  reportCapacity(measure: () => Record<string, number>): void {
    this.measure = measure;
    this.renew();
  }

  /** Settles once the registry answered this host's start (or could not be reached: then it is
   *  joined later) and the placement cache made its first catch-up; rejected when the registry
   *  refuses this host (no usable schema, another cluster's token, a name another instance holds).
   *  What may not run before that awaits it (main.ts); the edge and SSH listen without it. */
  ready: Promise<void> = Promise.resolve();

  /** Starts checking the schema and registering this host; answers `ready` (startRegistry does not wait for it). */
  start(): Promise<void> {
    this.log.info('registry', { registry: this.pool.where, host: this.o.host, advertise: this.o.advertise, instance: this.identity.instance });
    const first = this.beat(true).catch((err) => {
      if (!isAppError(err) || err.code !== 'registry_unavailable') throw err;
    });
    // the first heartbeat is the one under way: a renew meanwhile waits for it
    this.beating = first
      .catch(() => {})
      .finally(() => {
        this.beating = undefined;
        if (this.renewAgain) this.renew();
      });
    this.timer = setInterval(() => void this.tick(), beatEvery(this.o.leaseMs));
    this.timer.unref();
    this.ready = first.then(() => this.placements.start());
    this.ready.catch(() => clearInterval(this.timer)); // refused: nothing renewed (the daemon stops)
    return this.ready;
  }

  private tick(): void {
    this.beating ??= this.beat(false)
      .catch((err) => {
        if (isAppError(err) && err.code === 'registry_unavailable') return;
        // a schema that became unusable (a newer rootbox migrated it), a name this host may not
        // hold (refused when it joined late, or taken over): stop renewing, say why
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
    const started = performance.now();
    try {
      if (!this.checked) {
        await assertUsable(this.pool);
        // reads only: a wrong token is refused before this host writes anything
        await checkToken(this.pool, this.o.keys);
        const sealed = await sealClear(this.pool, this.o.keys);
        if (sealed) this.log.info('registry secrets sealed under the cluster token', { sealed });
        this.checked = true;
      }
      if (!this.identity.held) await this.claim();
      else if (!(await this.hosts.renew(this.facts(), this.identity.run, starting || !this.reachable))) {
        this.identity.held = false;
        throw AppError.of('host_name_taken', `another run or instance holds the host name ${this.o.host} now: this host writes nothing more under it`);
      }
      this.placements.heartbeat(true);
      if (!this.reachable) this.log.info('registry reachable again', { registry: this.pool.where });
      this.reachable = true;
      this.reachedAt = started;
      this.settings.retry();
    } catch (err) {
      // the registry could not be reached: the others' leases that run out meanwhile are not counted
      if (isAppError(err) && err.code === 'registry_unavailable') this.placements.heartbeat(false);
      if (isAppError(err) && err.code === 'registry_unavailable' && this.reachable) {
        this.reachable = false;
        this.log.warn('registry unreachable; serving what this host has', { registry: this.pool.where });
      }
      throw err;
    }
  }

  /** Takes this host's name for its instance (identity.ts); throws when it may not. */
  private async claim(): Promise<void> {
    const c = await claimName(this.pool, this.facts(), this.identity, { leaseMs: this.o.leaseMs, replace: this.o.replaceHost });
    this.identity.held = true;
    if (c.replaced)
      this.log.warn('host name taken over from another instance (--replace-host): its servers are marked lost, nothing deleted', {
        host: this.o.host,
        replaced: c.replaced,
        lost: c.lost,
      });
  }

  /** Starts the self-fence over this host's servers (selffence.ts; with recoverAfter 0 it only reads the contact). */
  fenceServers(servers: FencedServers, clock: Clock, healed?: () => Promise<boolean | void>): SelfFence {
    this.selfFence?.stop();
    this.selfFence = new SelfFence({
      healed,
      contact: this.contact,
      servers,
      recoverAfterMs: this.o.recoverAfterMs ?? 0,
      log: this.log.child({ part: 'selffence' }),
      clock,
      settlement: this.settlement,
    });
    this.selfFence.start();
    return this.selfFence;
  }

  /** Registers the public key of this host's channel certificate (its SPKI hash): the other
   *  hosts' channel listeners take a connection naming this host only with that key. */
  async registerChannelKey(key: string): Promise<void> {
    if (!this.identity.held || !(await this.hosts.setChannelKey(this.o.host, key, this.identity.run)))
      throw AppError.of('host_name_taken', `this run does not hold the host name ${this.o.host}: its channel key is not registered`);
  }

  /** Copies what the box has into the registry once (join.ts), before the host serves in cluster
   *  mode; a box that joined before (or has nothing) needs no registry for it. A box with records
   *  not in the registry yet does not start while the registry cannot be reached or this run does
   *  not hold its name: its customers' keys would answer 401 on every host. */
  async join(box: BoxRecords, step?: (name: string) => void): Promise<JoinReport> {
    const need = !box.joined();
    if (need && !this.up) {
      this.tick(); // one more try now (the start's may have met the registry away)
      await this.beating;
    }
    if (need && !this.up && box.accounts().length + box.domains().length + box.certificates().length + box.servers().length + box.payments().length > 0)
      throw AppError.of(
        'registry_unavailable',
        `this box has records the cluster registry does not have yet and the registry at ${this.pool.where} cannot be reached: it joins (and serves) once it can`,
        { retryAfter: 5 },
      );
    return joinRegistry({ pool: this.pool, host: this.o.host, keys: this.o.keys, box, log: this.log, step });
  }

  /** This host's name in the cluster. */
  get host(): string {
    return this.o.host;
  }

  /** The registry as this host sees it now (status): reachable, schema, lease, hosts up. */
  report(): Promise<RegistryFacts> {
    return registryFacts(this.pool, this.o.host, this.o.leaseMs);
  }

  /** Whether the last heartbeat reached the registry (and this run holds its name there). */
  get up(): boolean {
    return this.reachable && this.checked && this.identity.held;
  }

  /** Stops renewing. `release`: the lease ends at once, so the others see this host down without
   *  waiting (a stop that leaves no server running); otherwise it runs out on its own, as a
   *  crash's would (main.ts: servers left running across a stop are still this host's, and a
   *  restart within the lease is just a restart). */
  async stop(o: { release?: boolean } = {}): Promise<void> {
    clearInterval(this.timer);
    this.selfFence?.stop();
    await this.placements.stop();
    await this.beating;
    if (o.release !== false && this.identity.held && this.reachable) await this.hosts.release(this.o.host, this.identity.run).catch(() => {});
    await this.pool.end();
  }
}
