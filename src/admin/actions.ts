// What an operator's command does inside the running daemon, through the services that own each
// part: sleep and wake go through the runtime and the idle tracker, deletes through hosting's
// Servers (pending-marked, crash-safe), keys through hosting's Accounts. An operator's suspension
// sets `suspended` (the subdomain answers 402, SSH and restarts are refused) with the flag
// `suspended_by_operator`, which billing's resume after credit leaves alone; resume clears it
// and starts the server unless its account is suspended by billing too.

import { AppError } from '../errors.js';
import type { Billing } from '../billing/index.js';
import type { PeerHealth } from '../channel/index.js';
import type { Config } from '../config/index.js';
import type { HostingCore } from '../hosting/index.js';
import type { Logger } from '../log/index.js';
import type { RegistryFacts } from '../registry/index.js';
import type { Runtime, ServerState } from '../runtime/index.js';
import type { AccountRecord, ServerRecord, Store } from '../store/index.js';
import { findAccount, findServer, OPERATOR_SUSPENDED, type Live, type ViewDeps } from './views.js';

/** The daemon's parts the admin channel uses (main.ts passes the daemon itself). */
export interface AdminDeps {
  cfg: Readonly<Config>;
  store: Store;
  billing: Billing;
  hosting: { core: HostingCore };
  runtime: Pick<Runtime, 'stop' | 'diskUsedBytes'>;
  /** The idle tracker: truthful state, and wake (shared with requests waking the same server). */
  presence: { state(id: string): ServerState | undefined; wake(id: string): Promise<void> };
  /** Forgets what the proxy caches of a server (its site record, whether its app listens). */
  proxy: { forget(id: string): void };
  edge: { readonly ports: { http: number; https: number } };
  ssh: { readonly port: number };
  /** Whether payments can be taken now (payments/health.ts), for status. */
  payments?: { health: { readonly view: { settlement: string; available: boolean; problems: string[] } } };
  /** The cluster registry (cluster mode only), for status. */
  registry?: { report(): Promise<RegistryFacts>; readonly host: string };
  /** The host-to-host channel (cluster mode with a CA), for `cluster status`. */
  channel?: { health(): PeerHealth[] };
  /** Moves of servers to other hosts of the cluster (src/moves). */
  moves?: {
    move(rec: ServerRecord, to: string): Promise<unknown>;
    placedOn(id: string): Promise<string | undefined>;
    recover?(host: string, o?: { force?: boolean }): Promise<unknown>;
  };
  log: Logger;
}

const ACCOUNT_ID = /^acc_[0-9a-f]{1,32}$/;

export class AdminActions {
  readonly views: ViewDeps;

  constructor(private readonly d: AdminDeps) {
    const live: Live = {
      state: (id) => d.presence.state(id),
      diskUsedBytes: (id) => d.runtime.diskUsedBytes(id),
      credits: (a) => d.billing.credits(a),
    };
    this.views = { store: d.store, cfg: d.cfg, live };
  }

  /** Hosting's checkpoints of servers, or 503 where this daemon keeps none. */
  checkpoints(): NonNullable<HostingCore['checkpoints']> {
    const c = this.d.hosting.core.checkpoints;
    if (!c?.engine.available) throw AppError.of('not_configured', 'checkpoints are not available on this host');
    return c;
  }

  server(ref: string): ServerRecord {
    const rec = findServer(this.d.store, this.d.cfg.domain, ref);
    if (!rec) throw AppError.of('unknown_target', `no server ${ref.slice(0, 80)}`);
    return rec;
  }

  /** An account by id (in cluster mode also one this host never saw: the registry's), or the
   *  account of a server of this host named by id, slug or subdomain. */
  async account(ref: string): Promise<AccountRecord> {
    const acc = findAccount(this.d.store, this.d.cfg.domain, ref) ?? (ACCOUNT_ID.test(ref) ? await this.d.hosting.core.accounts.book.byId(ref) : undefined);
    if (!acc) throw AppError.of('unknown_target', `no account ${ref.slice(0, 80)}`);
    return acc;
  }

  /** Puts the server to sleep now; the next visitor or SSH login wakes it as after an idle sleep. */
  async stop(rec: ServerRecord): Promise<void> {
    await this.d.runtime.stop(rec.id);
    this.d.proxy.forget(rec.id);
    this.d.log.info('admin: server put to sleep', { server: rec.id });
  }

  async start(rec: ServerRecord): Promise<void> {
    const now = this.d.store.servers.get(rec.id) ?? rec;
    if (now.suspended) throw AppError.of('suspended', `server ${rec.id} is suspended; resume it first (rootbox servers resume ${rec.id})`);
    await this.d.presence.wake(rec.id);
    this.d.log.info('admin: server started', { server: rec.id });
  }

  async suspend(rec: ServerRecord): Promise<void> {
    this.d.store.servers.update(rec.id, () => ({ suspended: true, flag: OPERATOR_SUSPENDED }));
    this.d.proxy.forget(rec.id); // the next request reads `suspended` from the store: 402
    this.d.hosting.core.settingsChanged(rec.id); // cluster mode: a recovery elsewhere keeps it suspended
    await this.d.runtime.stop(rec.id, { park: false }); // no parked container for a server that cannot wake
    this.d.proxy.forget(rec.id);
    this.d.log.info('admin: server suspended', { server: rec.id });
  }

  /** Ends an operator's suspension. True when the server runs again; false when its account is
   *  still suspended by billing (it stays suspended until credit is added). */
  async resume(rec: ServerRecord): Promise<boolean> {
    const billingHolds = this.d.store.billing.stateOf(rec.accountId).suspended === true;
    this.d.store.servers.update(rec.id, (r) => ({ suspended: billingHolds, flag: r.flag === OPERATOR_SUSPENDED ? null : r.flag }));
    this.d.proxy.forget(rec.id);
    this.d.hosting.core.settingsChanged(rec.id);
    if (billingHolds) return false;
    await this.d.presence.wake(rec.id);
    this.d.log.info('admin: server resumed', { server: rec.id });
    return true;
  }

  async delete(rec: ServerRecord): Promise<void> {
    await this.d.hosting.core.servers.delete(rec);
    this.d.log.info('admin: server deleted', { server: rec.id });
  }

  /** A new api_key for the account; the old one answers 401 revoked_api_key from now on. */
  async rotateKey(acc: AccountRecord): Promise<string> {
    const key = await this.d.hosting.core.accounts.rotate(acc);
    this.d.log.info('admin: api key rotated', { account: acc.id });
    return key;
  }

  /** The account's api_key stops working; nobody is told the new one (a verified account gets
   *  it back by phone login). */
  async revoke(acc: AccountRecord): Promise<void> {
    await this.d.hosting.core.accounts.rotate(acc);
    this.d.log.info('admin: api key revoked', { account: acc.id });
  }
}
