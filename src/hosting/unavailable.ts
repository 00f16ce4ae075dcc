// Servers of an account that another host of the cluster runs, as this host's placement cache
// knows them (registry.placements: loaded at start, followed by LISTEN/NOTIFY, hosts' leases
// counted down here). While that host is down (its lease ran out) nobody can ask it, so the API of
// any host answers for its servers: GET /servers lists them and GET /servers/{id} shows them with
// state `unavailable`, from the placement alone (subdomain; nothing else is known here: no
// exposed ports, the disk figure null — unknown, not zero —, the flags at their defaults). A
// server of a host that is up is that host's to answer for; when that host gives no list (cut
// off, too slow), GET /servers lists its servers the same way rather than leaving them out.

import type { AccountRecord } from '../store/index.js';
import type { Credits, ExposedPort } from './servers.js';

/** A placement (the registry's record: server → host at an epoch) as this module shows it, from
 *  the placement cache (the part read here). */
export interface PlacementToShow {
  serverId: string;
  slug: string;
  host: string;
  accountId: string;
}

/** The placement cache (cluster mode), as this module reads it. */
export interface PlacementsToShow {
  byServer(id: string): PlacementToShow | undefined;
  ofAccount(accountId: string): PlacementToShow[];
  /** `unavailable` when the server's host is down (its lease ran out). */
  state(serverId: string): 'unavailable' | undefined;
}

export interface UnavailableServer {
  id: string;
  subdomain: string;
  state: 'unavailable';
  never_sleep: boolean;
  suspended: boolean;
  flag: string | null;
  exposed_ports: ExposedPort[];
  usage: { disk_mb_used: number | null; domains: string[] };
  credits: Credits;
}

export class Unavailable {
  constructor(
    private readonly d: {
      placements?: PlacementsToShow;
      domain: string;
      credits(account: AccountRecord): Credits;
      /** Whether this host's store has the server (then it answers for it itself). */
      local(id: string): boolean;
    },
  ) {}

  /** The account's server `id` when another host runs it and that host is down. */
  one(account: AccountRecord, id: string): UnavailableServer | undefined {
    const p = this.d.placements?.byServer(id);
    return p && this.down(account, p) ? this.view(p, account) : undefined;
  }

  /** Every server of the account whose host is down, or is one of `silent` (up, but it gave no list: cut off, too slow). */
  all(account: AccountRecord, silent: readonly string[] = []): UnavailableServer[] {
    const ps = this.d.placements?.ofAccount(account.id) ?? [];
    const unheard = (p: PlacementToShow) => silent.includes(p.host) && p.accountId === account.id && !this.d.local(p.serverId);
    return ps.filter((p) => this.down(account, p) || unheard(p)).map((p) => this.view(p, account));
  }

  private down(account: AccountRecord, p: PlacementToShow): boolean {
    return p.accountId === account.id && !this.d.local(p.serverId) && this.d.placements?.state(p.serverId) === 'unavailable';
  }

  private view(p: PlacementToShow, account: AccountRecord): UnavailableServer {
    const subdomain = `${p.slug}.${this.d.domain}`;
    return {
      id: p.serverId,
      subdomain,
      state: 'unavailable',
      never_sleep: false,
      suspended: false,
      flag: null,
      exposed_ports: [],
      usage: { disk_mb_used: null, domains: [subdomain] },
      credits: this.d.credits(account),
    };
  }
}
