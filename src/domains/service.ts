// Servers' own domains: the claim (limits per tier, one holder per name, an unproven claim
// yielding to whoever publishes their own token), the records the owner must publish (a CNAME to
// <slug>.{domain}, or A/AAAA to the public address for a zone apex, and TXT _rootbox.<domain>),
// the views of the API, detaching, and the map the edge reads to route an active domain to its
// server. States: pending_dns → issuing → active, or failed with the reason (orders.ts moves
// them; a check on demand starts a failed one again). Pending domains are checked and active
// ones' certificates renewed every `checkInterval`. Registry mode (`shared`): a name is claimed in
// the registry before the local record, so it has one holder across every host.

import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { DomainRecord, Store } from '../store/index.js';
import type { DnsLookup } from './dns.js';
import { normalizeDomain, txtName } from './names.js';
import { Orders } from './orders.js';
import type { CertIssuer, DnsRecordView, DomainsSettings, DomainView, Tier } from './types.js';

export interface DomainsDeps {
  settings: DomainsSettings;
  store: Store;
  dns: DnsLookup;
  certs: CertIssuer;
  /** HMAC under the host secret: ownership tokens are derived, so a refused claimant can be told its own. */
  mac(value: string): string;
  log: Logger;
  now?: () => number;
  /** Registry mode: a domain has one holder across every host (claimed there before here). */
  shared?: SharedDomains;
}

/** Custom domains in the cluster registry (registry.shared implements it). */
export interface SharedDomains {
  /** False when a server (of any host) holds the name; `takeover` also takes an unproven claim. */
  claimDomain(d: { domain: string; serverId: string; accountId: string; state: string }, takeover?: boolean): Promise<boolean>;
  domainState(domain: string, serverId: string, state: string): Promise<void>;
  releaseDomain(domain: string, serverId: string): Promise<void>;
}

const iso = (t: number | undefined) => (t === undefined ? null : new Date(t).toISOString());

export class Domains {
  /** Active domain → slug of its server: what the edge looks up for a Host it does not know. */
  private readonly hosts = new Map<string, string>();
  private readonly orders: Orders;
  private timer?: NodeJS.Timeout;
  private sweeping = false;
  private readonly now: () => number;

  constructor(private readonly d: DomainsDeps) {
    this.now = d.now ?? Date.now;
    this.orders = new Orders({
      ...d,
      now: this.now,
      activated: (domain, slug, serverId) => {
        this.hosts.set(domain, slug);
        d.shared?.domainState(domain, serverId, 'active').catch((err) => d.log.warn('the registry did not take a domain state', { domain, err }));
      },
    });
  }

  /** The slug an active domain routes to; undefined for any other host. A map lookup. */
  readonly slugOf = (host: string): string | undefined => this.hosts.get(host);

  /** Active domains of a server, for its usage.domains. */
  activeOf(serverId: string): string[] {
    return this.d.store.domains
      .byServer(serverId)
      .filter((r) => r.state === 'active')
      .map((r) => r.domain)
      .sort();
  }

  get configured(): boolean {
    return this.d.certs.configured;
  }

  /** The ownership token of `domain` for `accountId` (a recovered server's domains get theirs here: moves/recover.ts). */
  token(accountId: string, domain: string): string {
    return this.d.mac(`rootbox domain ownership\n${accountId}\n${domain}`).slice(0, 40);
  }

  private slug(serverId: string): string | undefined {
    return this.d.store.servers.get(serverId)?.slug;
  }

  records(rec: Pick<DomainRecord, 'domain' | 'token' | 'serverId'> & { apex?: boolean }): DnsRecordView[] {
    const { domain, publicIp } = this.d.settings;
    const point: DnsRecordView = rec.apex
      ? { type: publicIp.includes(':') ? 'AAAA' : 'A', name: rec.domain, value: publicIp }
      : { type: 'CNAME', name: rec.domain, value: `${this.slug(rec.serverId) ?? '?'}.${domain}` };
    return [point, { type: 'TXT', name: txtName(rec.domain), value: rec.token }];
  }

  view(rec: DomainRecord): DomainView {
    return {
      domain: rec.domain,
      server: rec.serverId,
      state: rec.state,
      reason: rec.reason ?? null,
      records: this.records(rec),
      created_at: new Date(rec.createdAt).toISOString(),
      checked_at: iso(rec.checkedAt),
      active_at: iso(rec.activeAt),
    };
  }

  list(serverId: string): DomainView[] {
    return this.d.store.domains
      .byServer(serverId)
      .sort((a, b) => a.createdAt - b.createdAt)
      .map((r) => this.view(r));
  }

  /** The server's record of a domain as given by a client (normalised first), or 404. */
  owned(serverId: string, input: string): DomainRecord {
    let domain: string;
    try {
      domain = normalizeDomain(input, this.d.settings.domain);
    } catch {
      domain = '';
    }
    const rec = domain ? this.d.store.domains.get(domain) : undefined;
    if (!rec || rec.serverId !== serverId) throw AppError.of('domain_not_found', `server ${serverId} has no domain ${String(input).slice(0, 100)}`);
    return rec;
  }

  /** Attaches a domain to a server (pending until its records are found); answers what to publish. */
  async add(account: { id: string; tier: Tier }, serverId: string, input: unknown): Promise<DomainView> {
    const domain = normalizeDomain(input, this.d.settings.domain);
    if (!this.d.certs.configured) {
      throw AppError.of(
        'not_configured',
        'custom domains need certificates from an ACME directory, and this host has none configured (https.acme.directory); its servers answer on their <slug> subdomain only',
      );
    }
    const cur = this.d.store.domains.get(domain);
    if (cur?.serverId === serverId) return this.view(cur);
    if (cur?.accountId === account.id) {
      throw AppError.of(
        'domain_taken',
        `${domain} is already attached to your server ${cur.serverId}; remove it there first (DELETE /servers/${cur.serverId}/domains/${domain})`,
      );
    }
    const limit = this.d.settings.limits[account.tier];
    const held = this.d.store.domains.byAccount(account.id).length;
    if (held >= limit) {
      const raise =
        account.tier === 'anonymous'
          ? 'verify a phone or add credit to attach domains'
          : account.tier === 'verified'
            ? 'add credit to raise it'
            : 'ask the operator to raise it';
      throw AppError.of(
        'domain_limit',
        `a ${account.tier} account may attach ${limit} domain${limit === 1 ? '' : 's'} to its servers and yours holds ${held}; ${raise}`,
        {
          extra: { limit, tier: account.tier },
        },
      );
    }
    const token = this.token(account.id, domain);
    // Another account's claim: kept while proven (issuing, active); an unproven one yields to
    // whoever publishes its own token, so nobody can hold a name they do not control.
    let takeover = false;
    if (cur) {
      const proven = cur.state === 'active' || cur.state === 'issuing';
      takeover = !proven && (await this.hasToken(domain, token));
      if (!takeover) {
        throw AppError.of(
          'domain_taken',
          proven
            ? `${domain} is attached to a server of another account`
            : `${domain} is claimed by another account that has not proven it; if the name is yours, publish TXT ${txtName(domain)} "${token}" and ask again`,
        );
      }
    }
    const apex = (await this.d.dns.apex(domain).catch(() => undefined)) ?? false;
    const rec: DomainRecord = {
      domain,
      serverId,
      accountId: account.id,
      token,
      state: 'pending_dns',
      apex: apex || domain.split('.').length === 2,
      createdAt: this.now(),
    };
    // registry mode: the name is claimed across every host first (a unique key), then here
    if (this.d.shared && !(await this.d.shared.claimDomain({ domain, serverId, accountId: account.id, state: rec.state }, takeover))) {
      throw AppError.of('domain_taken', `${domain} is attached to another server`);
    }
    const { stored, written } = this.d.store.domains.claim(rec, (c) => (takeover ? c?.state === 'pending_dns' || c?.state === 'failed' : c === undefined));
    if (!written) {
      if (this.d.shared && !takeover) await this.d.shared.releaseDomain(domain, serverId).catch(() => {});
      throw AppError.of('domain_taken', `${domain} was just claimed by another request`);
    }
    if (takeover) this.d.log.info('domain claim taken over by its proven owner', { domain, from: cur!.serverId, to: serverId });
    this.d.log.info('domain added', { domain, server: serverId, account: account.id });
    return this.view(stored);
  }

  private async hasToken(domain: string, token: string): Promise<boolean> {
    return (await this.d.dns.txt(txtName(domain)).catch((): string[] => [])).includes(token);
  }

  /** Checks now (POST …/check): a failed domain starts again; 429 when its orders this hour are used up. */
  async checkNow(rec: DomainRecord): Promise<DomainView> {
    if (rec.state === 'failed' || rec.state === 'pending_dns') {
      const wait = this.orders.wait(rec.domain);
      if (wait > 0) {
        const n = this.d.settings.attemptsPerHour;
        throw AppError.of('issuance_rate_limited', `${rec.domain} used its ${n} certificate orders of this hour; check again later`, {
          retryAfter: Math.ceil(wait / 1000),
        });
      }
      if (rec.state === 'failed') this.d.store.domains.update(rec.domain, rec.serverId, { state: 'pending_dns' });
      await this.orders.check(rec.domain, true);
    }
    const now = this.d.store.domains.get(rec.domain);
    if (!now || now.serverId !== rec.serverId) throw AppError.of('domain_not_found', `server ${rec.serverId} has no domain ${rec.domain}`);
    return this.view(now);
  }

  /** Detaches a domain: routing first, then its certificate, then the record. */
  async remove(rec: DomainRecord): Promise<void> {
    await this.d.shared?.releaseDomain(rec.domain, rec.serverId); // registry down: 503, nothing removed
    this.hosts.delete(rec.domain);
    await this.d.certs.remove(rec.domain).catch((err) => this.d.log.warn('removing a custom domain certificate failed', { domain: rec.domain, err }));
    this.d.store.domains.remove(rec.domain, rec.serverId);
    this.d.log.info('domain removed', { domain: rec.domain, server: rec.serverId });
  }

  /** Everything a deleted server held. */
  async releaseServer(serverId: string): Promise<void> {
    for (const rec of this.d.store.domains.byServer(serverId)) await this.remove(rec);
  }

  /** A server moving to another host (src/moves): its domains leave this host — records and
   *  routing — while the registry's claims, states and certificates stay (the target's now). */
  handOff(serverId: string): DomainRecord[] {
    const recs = this.d.store.domains.byServer(serverId);
    for (const rec of recs) {
      this.hosts.delete(rec.domain);
      this.d.store.domains.remove(rec.domain, serverId);
    }
    return recs;
  }

  /** The domains of a server moved here from another host: kept here and, active ones, routed to its slug. */
  takeOver(recs: readonly DomainRecord[], slug: string): void {
    for (const rec of recs) {
      const { written } = this.d.store.domains.claim(rec, (cur) => !cur || cur.serverId === rec.serverId);
      if (written && rec.state === 'active') this.hosts.set(rec.domain, slug);
    }
  }

  /** Loads the active domains; an order a stop cut off is checked again. */
  load(): void {
    for (const rec of this.d.store.domains.all()) {
      if (!this.d.store.servers.get(rec.serverId)) continue;
      if (rec.state === 'active') {
        this.hosts.set(rec.domain, this.slug(rec.serverId)!);
        // the other hosts route it only once the registry says active (a state write lost before a stop)
        this.d.shared
          ?.domainState(rec.domain, rec.serverId, 'active')
          .catch((err) => this.d.log.warn('the registry did not take a domain state', { domain: rec.domain, err }));
      }
      if (rec.state === 'issuing')
        this.d.store.domains.update(rec.domain, rec.serverId, { state: 'pending_dns', reason: 'the certificate order was cut off by a restart' });
    }
  }

  /** Checks pending domains every `checkInterval` (first after one interval: the edge is up by then). */
  start(): void {
    this.timer = setInterval(() => void this.sweep(), this.d.settings.checkInterval);
    this.timer.unref();
  }

  /** One pass at a time (a DNS server that does not answer makes a pass slow); renewals run on in the background. */
  private async sweep(): Promise<void> {
    if (this.sweeping) return;
    this.sweeping = true;
    try {
      for (const rec of this.d.store.domains.all()) {
        if (!this.d.store.servers.get(rec.serverId)) continue;
        if (rec.state === 'pending_dns')
          await this.orders.check(rec.domain, false).catch((err) => this.d.log.warn('domain check failed', { domain: rec.domain, err }));
        else if (rec.state === 'active' && this.orders.due(rec.domain)) void this.orders.renew(rec);
      }
    } finally {
      this.sweeping = false;
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.orders.stop();
  }
}
