// Servers' own domains: claim (limits per tier, one holder per name), the records the owner must
// publish, the ownership check (TXT _rootbox.<domain> = token, and the name pointing at this host
// by CNAME to <slug>.{domain} or A/AAAA to its public address), the certificate order through
// HTTP-01 once proven (at most `attemptsPerHour` orders per domain), and the map the edge reads
// to route an active domain to its server. States: pending_dns → issuing → active, or failed
// with the reason (a check on demand starts a failed one again).

import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { DomainRecord, Store } from '../store/index.js';
import { DnsUnavailable, type DnsLookup } from './dns.js';
import { normalizeDomain, txtName } from './names.js';

export type Tier = 'anonymous' | 'verified' | 'paid';

export interface DomainsSettings {
  /** The service's own domain. */
  domain: string;
  publicIp: string;
  limits: Record<Tier, number>;
  attemptsPerHour: number;
  checkInterval: number;
  pendingTimeout: number;
}

/** Certificates for servers' own domains (the ACME module behind it). */
export interface CertIssuer {
  /** False when no ACME directory is configured: custom domains are then refused (503). */
  readonly configured: boolean;
  /** Orders a certificate for the name through HTTP-01 and serves it by SNI once issued. */
  issue(domain: string): Promise<void>;
  /** Stops serving the name's certificate and forgets it. */
  remove(domain: string): Promise<void>;
  /** When the name's certificate expires (ms since the epoch); undefined when it has none. */
  notAfter(domain: string): number | undefined;
}

export interface DomainsDeps {
  settings: DomainsSettings;
  store: Store;
  dns: DnsLookup;
  certs: CertIssuer;
  /** HMAC under the host secret: ownership tokens are derived, so a refused claimant can be told its own. */
  mac(value: string): string;
  log: Logger;
  now?: () => number;
}

export interface DnsRecordView {
  type: 'CNAME' | 'A' | 'AAAA' | 'TXT';
  name: string;
  value: string;
}

export interface DomainView {
  domain: string;
  server: string;
  state: DomainRecord['state'];
  reason: string | null;
  records: DnsRecordView[];
  created_at: string;
  checked_at: string | null;
  active_at: string | null;
}

const HOUR = 3_600_000;
/** An active domain's certificate is ordered again this long before it expires. */
const RENEW_BEFORE = 30 * 24 * HOUR;
const iso = (t: number | undefined) => (t === undefined ? null : new Date(t).toISOString());

export class Domains {
  /** Active domain → slug of its server: what the edge looks up for a Host it does not know. */
  private readonly hosts = new Map<string, string>();
  private readonly running = new Map<string, Promise<void>>();
  private readonly ordering = new Set<Promise<void>>();
  private timer?: NodeJS.Timeout;
  private readonly now: () => number;

  constructor(private readonly d: DomainsDeps) {
    this.now = d.now ?? Date.now;
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

  private token(accountId: string, domain: string): string {
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
    const { stored, written } = this.d.store.domains.claim(rec, (c) => (takeover ? c?.state === 'pending_dns' || c?.state === 'failed' : c === undefined));
    if (!written) throw AppError.of('domain_taken', `${domain} was just claimed by another request`);
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
      const wait = this.orderWait(rec.domain);
      if (wait > 0) {
        const n = this.d.settings.attemptsPerHour;
        throw AppError.of('issuance_rate_limited', `${rec.domain} used its ${n} certificate orders of this hour; check again later`, {
          retryAfter: Math.ceil(wait / 1000),
        });
      }
      if (rec.state === 'failed') this.d.store.domains.update(rec.domain, rec.serverId, { state: 'pending_dns' });
      await this.check(rec.domain, true);
    }
    const now = this.d.store.domains.get(rec.domain);
    if (!now || now.serverId !== rec.serverId) throw AppError.of('domain_not_found', `server ${rec.serverId} has no domain ${rec.domain}`);
    return this.view(now);
  }

  /** ms until the domain may order a certificate again (0: now). */
  private orderWait(domain: string): number {
    const since = this.now() - HOUR;
    const orders = this.d.store.domains.ordersSince(domain, since);
    return orders.length < this.d.settings.attemptsPerHour ? 0 : Math.max(1, orders[orders.length - this.d.settings.attemptsPerHour] + HOUR - this.now());
  }

  /** One check of a pending domain at a time; a check asked during one waits for it. */
  private check(domain: string, manual: boolean): Promise<void> {
    let p = this.running.get(domain);
    if (!p) {
      p = this.checkOnce(domain, manual).finally(() => this.running.delete(domain));
      this.running.set(domain, p);
    }
    return p;
  }

  private async checkOnce(domain: string, manual: boolean): Promise<void> {
    const rec = this.d.store.domains.get(domain);
    if (!rec || rec.state !== 'pending_dns') return;
    const missing = await this.missing(rec);
    const at = this.now();
    if (missing) {
      const expired = !manual && at - rec.createdAt > this.d.settings.pendingTimeout;
      this.d.store.domains.update(domain, rec.serverId, {
        state: expired ? 'failed' : 'pending_dns',
        reason: expired ? `the DNS records were not found within ${Math.round(this.d.settings.pendingTimeout / HOUR)} h: ${missing}` : missing,
        checkedAt: at,
      });
      return;
    }
    if (this.orderWait(domain) > 0) {
      this.d.store.domains.update(domain, rec.serverId, { reason: 'records found; waiting for the hourly limit of certificate orders', checkedAt: at });
      return;
    }
    this.d.store.domains.addOrder(domain, at, at - HOUR);
    if (!this.d.store.domains.update(domain, rec.serverId, { state: 'issuing', reason: undefined, checkedAt: at })) return;
    const p = this.issue(rec).finally(() => this.ordering.delete(p));
    this.ordering.add(p);
  }

  /** What the owner still has to publish, or undefined when ownership is proven and the name points here. */
  private async missing(rec: DomainRecord): Promise<string | undefined> {
    const slug = this.slug(rec.serverId);
    if (!slug) return 'the server is gone';
    const target = `${slug}.${this.d.settings.domain}`;
    try {
      const [txt, cname, addrs] = await Promise.all([this.d.dns.txt(txtName(rec.domain)), this.d.dns.cname(rec.domain), this.d.dns.addresses(rec.domain)]);
      const wants: string[] = [];
      if (!txt.includes(rec.token)) wants.push(`TXT ${txtName(rec.domain)} "${rec.token}" not found`);
      if (!cname.includes(target) && !addrs.includes(this.d.settings.publicIp)) {
        wants.push(`${rec.domain} must be a CNAME to ${target} or have an A/AAAA record ${this.d.settings.publicIp}`);
      }
      return wants.length ? wants.join('; ') : undefined;
    } catch (e) {
      if (e instanceof DnsUnavailable) return 'the DNS server did not answer; checked again later';
      throw e;
    }
  }

  private async issue(rec: DomainRecord): Promise<void> {
    const t0 = this.now();
    try {
      await this.d.certs.issue(rec.domain);
    } catch (e) {
      this.d.log.warn('certificate order for a custom domain failed', { domain: rec.domain, server: rec.serverId, err: e });
      const reason =
        e instanceof AppError
          ? e.detail
          : `the certificate authority did not issue a certificate: http://${rec.domain}/.well-known/acme-challenge/ must reach this host on port 80; POST …/check tries again`;
      this.d.store.domains.update(rec.domain, rec.serverId, { state: 'failed', reason, checkedAt: this.now() });
      return;
    }
    const slug = this.slug(rec.serverId);
    const done = slug ? this.d.store.domains.update(rec.domain, rec.serverId, { state: 'active', activeAt: this.now(), reason: undefined }) : undefined;
    if (!done) {
      // removed (or its server deleted) while the order ran: the certificate goes too
      await this.d.certs.remove(rec.domain).catch((err) => this.d.log.warn('removing an orphan certificate failed', { domain: rec.domain, err }));
      return;
    }
    this.hosts.set(rec.domain, slug!);
    this.d.log.info('custom domain active', { domain: rec.domain, server: rec.serverId, ms: this.now() - t0 });
  }

  /** Detaches a domain: routing first, then its certificate, then the record. */
  async remove(rec: DomainRecord): Promise<void> {
    this.hosts.delete(rec.domain);
    await this.d.certs.remove(rec.domain).catch((err) => this.d.log.warn('removing a custom domain certificate failed', { domain: rec.domain, err }));
    this.d.store.domains.remove(rec.domain, rec.serverId);
    this.d.log.info('domain removed', { domain: rec.domain, server: rec.serverId });
  }

  /** Everything a deleted server held. */
  async releaseServer(serverId: string): Promise<void> {
    for (const rec of this.d.store.domains.byServer(serverId)) await this.remove(rec);
  }

  /** Loads the active domains; an order a stop cut off is checked again. */
  load(): void {
    for (const rec of this.d.store.domains.all()) {
      if (!this.d.store.servers.get(rec.serverId)) continue;
      if (rec.state === 'active') this.hosts.set(rec.domain, this.slug(rec.serverId)!);
      if (rec.state === 'issuing')
        this.d.store.domains.update(rec.domain, rec.serverId, { state: 'pending_dns', reason: 'the certificate order was cut off by a restart' });
    }
  }

  /** Checks pending domains every `checkInterval` (first after one interval: the edge is up by then). */
  start(): void {
    this.timer = setInterval(() => void this.sweep(), this.d.settings.checkInterval);
    this.timer.unref();
  }

  private async sweep(): Promise<void> {
    for (const rec of this.d.store.domains.all()) {
      if (!this.d.store.servers.get(rec.serverId)) continue;
      if (rec.state === 'pending_dns') await this.check(rec.domain, false).catch((err) => this.d.log.warn('domain check failed', { domain: rec.domain, err }));
      if (rec.state === 'active' && (this.d.certs.notAfter(rec.domain) ?? 0) - this.now() < RENEW_BEFORE) await this.renew(rec);
    }
  }

  /** Orders an active domain's certificate again (within the hourly orders); on failure the current one is kept. */
  private async renew(rec: DomainRecord): Promise<void> {
    if (this.running.has(rec.domain) || this.orderWait(rec.domain) > 0) return;
    const at = this.now();
    this.d.store.domains.addOrder(rec.domain, at, at - HOUR);
    const p = this.d.certs
      .issue(rec.domain)
      .then(
        () => {
          this.d.store.domains.update(rec.domain, rec.serverId, { reason: undefined, checkedAt: this.now() });
          this.d.log.info('custom domain certificate renewed', { domain: rec.domain, ms: this.now() - at });
        },
        (e) => {
          this.d.log.warn('custom domain certificate renewal failed; the current one is kept', { domain: rec.domain, err: e });
          this.d.store.domains.update(rec.domain, rec.serverId, {
            reason: 'renewing the certificate failed; the current one is served and the order is tried again',
            checkedAt: this.now(),
          });
        },
      )
      .finally(() => this.running.delete(rec.domain));
    this.running.set(rec.domain, p);
    await p;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await Promise.allSettled([...this.running.values(), ...this.ordering]);
  }
}
