// Server management for the hosting API: create (slug choice, limits, key pair, runtime),
// list, read, restart and delete, tier ceilings, and the Server object of spec part 2. A create
// writes the server record and the runtime's reservation in one transaction and stays pending
// (invisible, removed after a crash) until commit(), the last step before its answer; a delete
// marks the server first, so a crash part-way is finished at the next start (pending.ts).
// This class is the one writer of a server's limits (the server record's memory and disk).

import { randomBytes } from 'node:crypto';
import { AppError, isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { PlaceRequest } from '../placing.js';
import type { DiskSource, NetBounds, Runtime, ServerSpec, ServerState } from '../runtime/index.js';
import type { AccountRecord, ServerRecord, Store } from '../store/index.js';
import { TIER_LIMITS, tierOf, type Tier } from './accounts.js';
import { CREATE_DEADLINE_MS, PendingWork } from './pending.js';
import { anonIpOf, checkLocalServers, ipLimit, serverLimit, type SharedQuotas } from './quotas.js';
import { planSlugs, randomSlug } from './slugs.js';

/** What the runtime is given of a server: all of it from the server record. */
const specOf = (r: ServerRecord): ServerSpec => ({
  id: r.id,
  slug: r.slug,
  memoryBytes: r.memoryBytes,
  diskBytes: r.diskBytes,
  pendingUntil: r.pending?.until,
});

export interface KeyPair {
  privateKey: string;
  publicKey: string;
  fingerprint: string;
}

export interface Credits {
  tier: string;
  ram_gb_hours_left: number;
  egress_gb_left: number;
  balance_usd: number;
}

export interface ExposedPort {
  public: string;
  container_port: number;
  protocol: 'tcp';
}

export interface ServerDeps {
  store: Store;
  runtime: Runtime;
  log: Logger;
  domain: string;
  brands: ReadonlySet<string>;
  maxServersPerAccount: number;
  /** Servers anonymous accounts made from one address may hold together. */
  anonServersPerIp: number;
  /** Cluster mode: the caps counted across hosts, each create reserved in the registry first. */
  quotas?: Pick<SharedQuotas, 'reserveServer' | 'releaseServer'>;
  makeKeyPair(comment: string): KeyPair;
  credits(account: AccountRecord): Credits;
  exposedPorts(serverId: string): ExposedPort[];
  /** Releases everything outside the runtime a server holds (exposed ports, idle tracking). */
  release(serverId: string): Promise<void>;
  /** Truthful state (running/sleeping/waking…) as the proxy's idle tracker sees it. */
  stateOf?(serverId: string): ServerState | undefined;
  /** The server's active own domains (usage.domains lists them after its subdomain). */
  domainsOf?(serverId: string): string[];
  /** Registry mode: slugs and placements shared by every host. */
  names?: SharedNames;
  /** Registry mode: the registry forgets an account a failed create made (pending.ts). */
  forgetAccount?(accountId: string): Promise<void>;
  /** This host's public address (its servers' placement names it). */
  publicIp: string;
  /** Bounds on a server's outbound connections by tier (runtime.egress); absent: the runtime's default. */
  flowBounds?: Readonly<Record<Tier, NetBounds>>;
}

/** The cluster registry's names and placements (registry mode); absent on a single box, where
 *  the store's slug index alone decides. */
/** What the registry keeps of a server's settings besides its disk and other records. */
export interface ServerSettings {
  serverId: string;
  neverSleep: boolean;
  /** Container ports exposed (public ports are each host's own). */
  exposed: number[];
  /** Suspended, and its flag (an operator's suspension outlasts a recovery elsewhere). */
  suspended?: boolean;
  flag?: string | null;
}

export interface SharedNames {
  /** Claims a slug for a server across every host; false when any host holds it. */
  claim(slug: string, serverId: string): Promise<boolean>;
  release(slug: string, serverId: string): Promise<void>;
  /** Records that a committed server runs on this host (and its settings: never_sleep). */
  place(p: PlaceRequest): Promise<unknown>;
  /** A server's settings changed on this host (its exposed container ports): what a recovery
   *  elsewhere brings back without this host (registry/settings.ts). */
  settings?(row: ServerSettings): void;
  /** Forgets a server's placement and slug (it is being deleted). */
  remove(serverId: string): Promise<void>;
  /** This host's name in the cluster, and where the registry places a server now (host, epoch;
   *  `deleted`, or undefined when it has no record of it): a host back from its self-fence reads it,
   *  and the checkpoints' sweep of orphans asks whether any host has the server (core.ts). */
  self?: string;
  placementOf?(serverId: string): Promise<{ host: string; epoch: number } | 'deleted' | undefined>;
  /** The placement epoch this host last wrote for the server in this run (its checkpoints record it). */
  epochOf?(serverId: string): number | undefined;
  /** At start: the registry made to match this host's committed servers (`moving`: those handed
   *  over here not committed yet, whose placement stays as it is). */
  reconcile(
    servers: readonly { id: string; slug: string; accountId: string; settings?: Omit<ServerSettings, 'serverId'> }[],
    publicIp: string,
    moving?: ReadonlySet<string>,
  ): Promise<{
    removed: string[];
    lost?: string[];
    released: string[];
    placed: string[];
    conflicts: string[];
    elsewhere: string[];
    moved?: string[];
    deleted: string[];
  }>;
}

/** Whether the bounds a server has (the runtime's view; absent where the runtime enforces none)
 *  differ from the wanted ones. */
export const netDiffers = (have: NetBounds | undefined, want: NetBounds | undefined): boolean =>
  !!want && !!have && (have.flows !== want.flows || have.newFlowsPerSecond !== want.newFlowsPerSecond);

export interface CreateInput {
  subdomains?: string[];
  neverSleep?: boolean;
  /** A fork: the new server's disk from a checkpoint (checkpoints.ts). */
  fromDisk?: DiskSource;
}

export interface Created {
  record: ServerRecord;
  privateKey: string;
  subdomainNote?: string;
}

export class Servers {
  readonly pending: PendingWork;

  /** Construction is the hosting start: pending work of an earlier run is removed here. */
  constructor(private readonly d: ServerDeps) {
    const quotas = d.quotas;
    this.pending = new PendingWork({
      store: d.store,
      runtime: d.runtime,
      log: d.log,
      release: d.release,
      forgetAccount: d.forgetAccount,
      releaseClaim: quotas && ((id) => quotas.releaseServer(id)),
    });
    this.pending.recover();
  }

  /** Takes `slug` for the record: in the registry first (registry mode), then in the store with
   *  the runtime's reservation, in one transaction; undefined when it is taken. */
  private async take(base: Omit<ServerRecord, 'slug'>, slug: string, account: AccountRecord, fromDisk?: DiskSource): Promise<ServerRecord | undefined> {
    const names = this.d.names;
    if (names && !(await names.claim(slug, base.id))) return undefined;
    const record = { ...base, slug };
    let inserted = false;
    try {
      inserted = this.d.store.atomically(() => {
        // the caps checked in the transaction that inserts: the pending record is the reservation
        checkLocalServers(this.d.store, account, this.d.maxServersPerAccount, this.d.anonServersPerIp);
        if (!this.d.store.servers.insert(record)) return false;
        this.d.runtime.reserve?.({ ...specOf(record), fromDisk });
        return true;
      });
    } finally {
      if (!inserted && names) await names.release(slug, base.id);
    }
    return inserted ? record : undefined;
  }

  private async chooseAndInsert(
    input: CreateInput,
    base: Omit<ServerRecord, 'slug'>,
    account: AccountRecord,
  ): Promise<{ record: ServerRecord; note?: string }> {
    const plan = planSlugs(input.subdomains, this.d.brands);
    for (const slug of plan.candidates) {
      const record = await this.take(base, slug, account, input.fromDisk);
      if (record) return { record, note: plan.skipped.length ? `skipped ${plan.skipped.join('; ')}` : undefined };
    }
    if (plan.candidates.length > 0) {
      throw AppError.of(
        'subdomain_taken',
        `every wanted subdomain is taken: ${plan.candidates.join(', ')}; ask for another or omit "subdomains" for a random one`,
      );
    }
    for (let i = 0; i < 20; i++) {
      const record = await this.take(base, randomSlug(), account, input.fromDisk);
      if (record) {
        const why = input.subdomains?.length ? `none of the wanted subdomains is usable (${plan.skipped.join('; ')})` : 'no subdomain was asked for';
        return { record, note: `${why}; assigned ${record.slug}.${this.d.domain}` };
      }
    }
    throw AppError.of('no_slug', 'could not find a free subdomain; try again');
  }

  /** Makes the server (pending: nobody sees it until commit). The server record (slug, key,
   *  limits) and the runtime's record (address, uid range) are written in one transaction, or
   *  neither is: a refused slug, address or uid range leaves nothing to undo. */
  async create(account: AccountRecord, input: CreateInput): Promise<Created> {
    this.pending.sweep();
    const max = this.d.maxServersPerAccount;
    if (this.d.store.servers.listByAccount(account.id, { withPending: true }).length >= max) throw serverLimit(max);
    const limits = TIER_LIMITS[tierOf(account)];
    const id = `srv_${randomBytes(6).toString('hex')}`;
    // cluster mode: one atomic check-and-reserve across every host before anything is made
    const quotas = this.d.quotas;
    if (quotas) {
      const claim = { serverId: id, accountId: account.id, maxPerAccount: max, anonIp: anonIpOf(account), maxPerIp: this.d.anonServersPerIp };
      const refused = await quotas.reserveServer({ ...claim, ttlMs: CREATE_DEADLINE_MS });
      if (refused === 'account') throw serverLimit(max);
      if (refused === 'ip') throw ipLimit(this.d.anonServersPerIp);
    }
    let record: ServerRecord;
    let note: string | undefined;
    let keys: KeyPair;
    try {
      keys = this.d.makeKeyPair(id); // inside: a throw here gives the reservation back too
      const pending = this.pending.mark('create');
      ({ record, note } = await this.chooseAndInsert(
        input,
        {
          id,
          accountId: account.id,
          sshPublicKey: keys.publicKey,
          keyFingerprint: keys.fingerprint,
          memoryBytes: limits.memoryBytes,
          diskBytes: limits.diskBytes,
          neverSleep: input.neverSleep ?? false,
          suspended: false,
          flag: null,
          createdAt: Date.now(),
          pending,
        },
        account,
      ));
    } catch (e) {
      await this.unclaim(id);
      throw e;
    }
    this.pending.begin(id);
    this.d.log.info('creating server', { id, slug: record.slug, account: account.id });
    try {
      await this.d.runtime.create({ ...specOf(record), net: this.netOf(account), fromDisk: input.fromDisk });
    } catch (e) {
      await this.abandon(id);
      if (e instanceof AppError) throw e;
      this.d.log.error('server create failed', { id, err: e });
      throw AppError.of('create_failed', 'the server could not be created on this host right now; try again in a minute', { cause: e });
    }
    return { record, privateKey: keys.privateKey, subdomainNote: note };
  }

  /** Cluster mode: the registry's reservation of a create goes (committed: its placement counts
   *  instead; failed: nothing counts). One that cannot be removed now expires with the create's deadline. */
  private async unclaim(id: string): Promise<void> {
    await this.d.quotas?.releaseServer(id).catch((err) => this.d.log.warn('a create reservation stays until it expires', { id, err }));
  }

  /** The create's last step before its answer is written: one synced commit makes the server
   *  (and the account the create made, if any) durable and visible. */
  async commit(created: Created, madeAccount?: string): Promise<void> {
    const { id, slug, accountId } = created.record;
    // registry mode: the placement is written first, so a committed server always has one (a
    // crash before the local commit leaves a placement that the next start removes)
    const { sshPublicKey, keyFingerprint, neverSleep } = created.record;
    await this.d.names?.place({ serverId: id, accountId, slug, publicIp: this.d.publicIp, sshPublicKey, keyFingerprint, neverSleep });
    const ok = this.d.store.commitCreate(id, madeAccount);
    this.pending.end(id);
    // past its deadline the create counts as abandoned: the caller rolls it back
    if (!ok) {
      await this.d.names?.remove(id);
      throw AppError.of('create_failed', 'the server took too long to create; try again');
    }
    void this.unclaim(id); // its placement counts now (the reservation no longer does): not awaited before the answer
    this.d.log.info('server created', { id, slug, account: accountId });
  }

  /** Rolls back a create that will not be answered 200 (host side first, the record last). A
   *  failed rollback stays pending and is retried by the next sweep or start. */
  async abandon(id: string): Promise<void> {
    const rec = this.d.store.servers.getAny(id);
    this.pending.end(id);
    if (!rec?.pending) return void (await this.unclaim(id));
    await this.pending.finish(rec).catch((err) => this.d.log.error('rolling back a create failed; retried later', { id, err }));
  }

  /** The caller's server, or 404 (also for another account's server: no existence leak). */
  owned(account: AccountRecord, id: string): ServerRecord {
    const rec = /^srv_[0-9a-f]{1,32}$/.test(id) ? this.d.store.servers.get(id) : undefined;
    if (!rec || rec.accountId !== account.id) throw AppError.of('server_not_found', `you have no server ${id.slice(0, 40)}`);
    return rec;
  }

  list(account: AccountRecord): ServerRecord[] {
    return this.d.store.servers.listByAccount(account.id);
  }

  async restart(rec: ServerRecord): Promise<void> {
    if (rec.suspended) throw AppError.of('suspended', 'this server is suspended until credit is added');
    await this.d.runtime.stop(rec.id);
    await this.d.runtime.start(rec.id);
  }

  /** Marked first (invisible, finished by the next start if cut off), then ports, runtime and
   *  the record; the answer follows the record's synced removal. */
  async delete(rec: ServerRecord): Promise<void> {
    this.pending.sweep();
    // registry mode: the shared records go first; a registry that cannot be reached refuses the
    // delete (503) with nothing changed
    await this.d.names?.remove(rec.id);
    const m = this.pending.mark('delete');
    this.pending.begin(rec.id);
    try {
      if (!this.d.store.beginDelete(rec.id, m.by, m.until)) throw AppError.of('server_not_found', `you have no server ${rec.id}`);
      await this.d.release(rec.id);
      await this.d.runtime.delete(rec.id).catch((e) => {
        if (!(isAppError(e) && e.code === 'server_not_found')) throw e;
      });
      this.d.store.servers.remove(rec.id);
    } finally {
      this.pending.end(rec.id);
    }
    this.d.log.info('server deleted', { id: rec.id, slug: rec.slug });
  }

  /** Applies the account's tier ceilings to all its servers, live: the host first, then the
   *  server record (the only stored copy), so the record never names more than was applied and
   *  a crash in between leaves a lagging record that the next sync raises again. */
  async applyTier(account: AccountRecord): Promise<void> {
    const limits = TIER_LIMITS[tierOf(account)];
    const net = this.netOf(account);
    for (const s of this.list(account)) {
      const want = { memoryBytes: limits.memoryBytes, diskBytes: Math.max(s.diskBytes, limits.diskBytes) }; // disks never shrink
      const netChange = netDiffers(this.d.runtime.get(s.id)?.net, net);
      if (s.memoryBytes === want.memoryBytes && s.diskBytes === want.diskBytes && !netChange) continue;
      if (netChange) await this.d.runtime.resize(s.id, { ...want, net });
      else await this.d.runtime.resize(s.id, want);
      this.d.store.servers.setLimits(s.id, want);
    }
  }

  /** The bounds on connections of the account's servers (its tier's). */
  netOf(account: AccountRecord): NetBounds | undefined {
    const b = this.d.flowBounds?.[tierOf(account)];
    return b && { flows: b.flows, newFlowsPerSecond: b.newFlowsPerSecond };
  }

  async view(rec: ServerRecord, account: AccountRecord) {
    const rt = this.d.runtime.get(rec.id);
    const state: ServerState = this.d.stateOf?.(rec.id) ?? rt?.state ?? 'failed';
    const diskMb = rt ? Math.round((this.d.runtime.diskUsedBytes(rec.id) / 1048576) * 1000) / 1000 : 0;
    return {
      id: rec.id,
      subdomain: `${rec.slug}.${this.d.domain}`,
      state,
      never_sleep: rec.neverSleep,
      suspended: rec.suspended,
      flag: rec.flag,
      exposed_ports: this.d.exposedPorts(rec.id),
      usage: { disk_mb_used: diskMb, domains: [`${rec.slug}.${this.d.domain}`, ...(this.d.domainsOf?.(rec.id) ?? [])] },
      credits: this.d.credits(account),
    };
  }
}
