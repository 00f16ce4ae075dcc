// What the operator sees of servers and accounts (`rootbox servers list|show`, `rootbox accounts
// list|show`): built from the store, plus the daemon's live view when it answers (the truthful
// state, disk in use, credits as billing computes them). The CLI builds the same views from the
// store alone while the daemon is stopped; the state then is the one the store wants
// (`state_from: "store"`), which a stopped daemon's containers keep.

import { statSync } from 'node:fs';
import { join } from 'node:path';
import { creditsOf, OPERATOR_SUSPENDED, type Credits } from '../billing/index.js';
import type { Config } from '../config/index.js';
import { tierOf } from '../hosting/index.js';
import type { ServerState } from '../runtime/index.js';
import type { AccountRecord, LedgerEntry, ServerRecord, Store } from '../store/index.js';

export { OPERATOR_SUSPENDED };

/** The daemon's live view (absent when the CLI reads the store of a stopped daemon). */
export interface Live {
  state(id: string): ServerState | undefined;
  diskUsedBytes(id: string): number;
  credits(a: AccountRecord): Credits;
}

export interface ViewDeps {
  store: Store;
  cfg: Readonly<Pick<Config, 'dataDir' | 'domain' | 'publicIp' | 'billing'>>;
  live?: Live;
}

export type ServerView = ReturnType<typeof serverView>;
export type AccountView = ReturnType<typeof accountView>;

const diskImage = (dataDir: string, id: string) => join(dataDir, 'servers', id, 'disk.img');

/** Bytes the sparse disk image takes on the host (what copying it costs). */
function allocated(path: string): number | null {
  try {
    return statSync(path).blocks * 512;
  } catch {
    return null;
  }
}

export function serverView(d: ViewDeps, rec: ServerRecord) {
  const rt = d.store.runtime.get(rec.id);
  const account = d.store.accounts.get(rec.accountId);
  const state: ServerState | 'missing' = d.live ? (d.live.state(rec.id) ?? 'missing') : rt ? (rt.desired === 'running' ? 'running' : 'sleeping') : 'missing';
  const host = d.cfg.publicIp.includes(':') ? `[${d.cfg.publicIp}]` : d.cfg.publicIp;
  let diskUsed: number | null = null;
  if (d.live && state !== 'missing') diskUsed = d.live.diskUsedBytes(rec.id);
  const img = diskImage(d.cfg.dataDir, rec.id);
  return {
    id: rec.id,
    subdomain: `${rec.slug}.${d.cfg.domain}`,
    account: rec.accountId,
    tier: account ? tierOf(account) : null,
    state,
    state_from: d.live ? ('daemon' as const) : ('store' as const),
    suspended: rec.suspended,
    suspended_by: rec.suspended ? (rec.flag === OPERATOR_SUSPENDED ? ('operator' as const) : ('billing' as const)) : null,
    flag: rec.flag,
    never_sleep: rec.neverSleep,
    memory_bytes: rec.memoryBytes,
    disk_bytes: rec.diskBytes,
    disk_used_bytes: diskUsed,
    disk_allocated_bytes: allocated(img),
    disk_image: img,
    ip: rt?.ip ?? null,
    exposed_ports: d.store.exposures
      .byServer(rec.id)
      .filter((e) => !e.pending)
      .map((e) => ({ public: `${host}:${e.port}`, container_port: e.containerPort })),
    created_at: new Date(rec.createdAt).toISOString(),
  };
}

function grantOf(cfg: Config['billing']) {
  return (a: AccountRecord) =>
    a.phone
      ? { ramGbHours: cfg.verifiedGrantRamGbHours, egressGb: cfg.verifiedGrantEgressGb }
      : { ramGbHours: cfg.grantRamGbHours, egressGb: cfg.grantEgressGb };
}

export function accountView(d: ViewDeps, a: AccountRecord) {
  const credits = d.live ? d.live.credits(a) : creditsOf(d.store, grantOf(d.cfg.billing), a);
  const state = d.store.billing.stateOf(a.id);
  return {
    id: a.id,
    tier: credits.tier,
    phone: a.phone,
    balance_usd: credits.balance_usd,
    ram_gb_hours_left: credits.ram_gb_hours_left,
    egress_gb_left: credits.egress_gb_left,
    exhausted_since: state.exhaustedAt === undefined ? null : new Date(state.exhaustedAt).toISOString(),
    suspended_by_billing: state.suspended === true,
    servers: d.store.servers.listByAccount(a.id).map((s) => s.id),
    created_at: new Date(a.createdAt).toISOString(),
    created_ip: a.createdIp,
  };
}

/** The account's recent ledger entries (newest first), for `accounts show`: from the store, or
 *  the entries given (a running daemon's billing: the registry's ledger in cluster mode). */
export function ledgerView(store: Store, accountId: string, limit = 20, items: LedgerEntry[] = store.billing.entries(accountId, limit).items) {
  return items.map((e) => ({
    kind: e.kind,
    server: e.serverId ?? null,
    from: new Date(e.from).toISOString(),
    to: new Date(e.to).toISOString(),
    usd: e.usd,
    ram_gb_hours: e.ramGbHours,
    egress_gb: e.egressGb,
    source: e.source ?? null,
  }));
}

/** A server by id (srv_…), slug or full subdomain. */
export function findServer(store: Store, domain: string, ref: string): ServerRecord | undefined {
  if (/^srv_[0-9a-f]{1,32}$/.test(ref)) return store.servers.get(ref);
  const slug = ref.toLowerCase().endsWith(`.${domain}`) ? ref.slice(0, -domain.length - 1) : ref;
  return /^[a-z0-9-]{1,63}$/i.test(slug) ? store.servers.bySlug(slug.toLowerCase()) : undefined;
}

/** An account by id, or the account of a server named by id, slug or subdomain. */
export function findAccount(store: Store, domain: string, ref: string): AccountRecord | undefined {
  if (/^acc_[0-9a-f]{1,32}$/.test(ref)) return store.accounts.get(ref);
  const s = findServer(store, domain, ref);
  return s ? store.accounts.get(s.accountId) : undefined;
}
