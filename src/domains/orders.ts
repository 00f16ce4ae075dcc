// From pending_dns to active: the ownership check (TXT _rootbox.<domain> = token, and the name
// pointing at this host by CNAME to <slug>.{domain} or A/AAAA to its public address), then one
// certificate order through HTTP-01 — at most `attemptsPerHour` orders per domain per hour,
// counted in the store so neither a restart nor delete-and-add buys more — and the renewal of an
// active domain's certificate once a third of its lifetime (at most 30 days) is left. One check
// or order per domain at a time.

import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { DomainRecord, Store } from '../store/index.js';
import { DnsUnavailable, type DnsLookup } from './dns.js';
import { txtName } from './names.js';
import { HOUR, type CertIssuer, type DomainsSettings } from './types.js';

const RENEW_BEFORE_MAX = 30 * 24 * HOUR;
/** An order that has not ended by then is counted failed (the CA hangs). */
const ORDER_TIMEOUT = 5 * 60_000;

export interface OrdersDeps {
  settings: DomainsSettings;
  store: Store;
  dns: DnsLookup;
  certs: CertIssuer;
  log: Logger;
  now: () => number;
  /** The domain's certificate is served: route it. */
  activated(domain: string, slug: string, serverId: string): void;
}

export class Orders {
  private readonly running = new Map<string, Promise<void>>();

  constructor(private readonly d: OrdersDeps) {}

  /** ms until the domain may order a certificate again (0: now). */
  wait(domain: string): number {
    const n = this.d.settings.attemptsPerHour;
    const orders = this.d.store.domains.ordersSince(domain, this.d.now() - HOUR);
    return orders.length < n ? 0 : Math.max(1, orders[orders.length - n] + HOUR - this.d.now());
  }

  private slug(serverId: string): string | undefined {
    return this.d.store.servers.get(serverId)?.slug;
  }

  /** Checks a pending domain; when proven, starts its order (not awaited: the state shows `issuing`). */
  check(domain: string, manual: boolean): Promise<void> {
    return this.once(domain, () => this.checkOnce(domain, manual), false);
  }

  /** Runs one job per domain; a check asked during a check joins it. An order goes on after its check ended. */
  private once(domain: string, job: () => Promise<void>, order: boolean): Promise<void> {
    const cur = this.running.get(domain);
    if (cur) return order ? Promise.resolve() : cur;
    const p = job().finally(() => this.running.get(domain) === p && this.running.delete(domain));
    this.running.set(domain, p);
    return p;
  }

  private async checkOnce(domain: string, manual: boolean): Promise<void> {
    const rec = this.d.store.domains.get(domain);
    if (!rec || rec.state !== 'pending_dns') return;
    const missing = await this.missing(rec);
    const at = this.d.now();
    const { pendingTimeout } = this.d.settings;
    if (missing) {
      const expired = !manual && at - rec.createdAt > pendingTimeout;
      this.d.store.domains.update(domain, rec.serverId, {
        state: expired ? 'failed' : 'pending_dns',
        reason: expired ? `the DNS records were not found within ${Math.round(pendingTimeout / HOUR)} h: ${missing}` : missing,
        checkedAt: at,
      });
      return;
    }
    if (this.wait(domain) > 0) {
      this.d.store.domains.update(domain, rec.serverId, { reason: 'records found; waiting for the hourly limit of certificate orders', checkedAt: at });
      return;
    }
    this.d.store.domains.addOrder(domain, at, at - HOUR);
    if (!this.d.store.domains.update(domain, rec.serverId, { state: 'issuing', reason: undefined, checkedAt: at })) return;
    const p = this.issue(rec).finally(() => this.running.get(domain) === p && this.running.delete(domain));
    this.running.set(domain, p);
  }

  /** What the owner still has to publish, or undefined when ownership is proven and the name points here. */
  private async missing(rec: DomainRecord): Promise<string | undefined> {
    const slug = this.slug(rec.serverId);
    if (!slug) return 'the server is gone';
    const target = `${slug}.${this.d.settings.domain}`;
    const { dns } = this.d;
    try {
      const [txt, cname, addrs] = await Promise.all([dns.txt(txtName(rec.domain)), dns.cname(rec.domain), dns.addresses(rec.domain)]);
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

  /** The order, bounded in time; the CA's reason becomes the failed state's. */
  private async order(domain: string): Promise<void> {
    let t: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error('the certificate order took too long')), ORDER_TIMEOUT)));
    try {
      await Promise.race([this.d.certs.issue(domain), late]);
    } finally {
      clearTimeout(t);
    }
  }

  private async issue(rec: DomainRecord): Promise<void> {
    const t0 = this.d.now();
    try {
      await this.order(rec.domain);
    } catch (e) {
      this.d.log.warn('certificate order for a custom domain failed', { domain: rec.domain, server: rec.serverId, err: e });
      const said = e instanceof AppError ? e.detail : String((e as Error)?.message ?? e).slice(0, 300);
      const reason = `the certificate authority did not issue a certificate (${said}); http://${rec.domain}/.well-known/acme-challenge/ must reach this host on port 80, then POST …/check`;
      this.d.store.domains.update(rec.domain, rec.serverId, { state: 'failed', reason, checkedAt: this.d.now() });
      return;
    }
    const slug = this.slug(rec.serverId);
    const done = slug ? this.d.store.domains.update(rec.domain, rec.serverId, { state: 'active', activeAt: this.d.now(), reason: undefined }) : undefined;
    if (!done) {
      // removed (or its server deleted) while the order ran: the certificate goes too
      await this.d.certs.remove(rec.domain).catch((err) => this.d.log.warn('removing an orphan certificate failed', { domain: rec.domain, err }));
      return;
    }
    this.d.activated(rec.domain, slug!, rec.serverId);
    this.d.log.info('custom domain active', { domain: rec.domain, server: rec.serverId, ms: this.d.now() - t0 });
  }

  /** Whether an active domain's certificate is due: a third of its lifetime left, at most 30 days (or none stored). */
  due(domain: string): boolean {
    const v = this.d.certs.validity(domain);
    if (!v) return true;
    return this.d.now() >= v.notAfter - Math.min(RENEW_BEFORE_MAX, (v.notAfter - v.issuedAt) / 3);
  }

  /** Orders an active domain's certificate again (within the hourly orders); on failure the current one stays. */
  renew(rec: DomainRecord): Promise<void> {
    if (this.wait(rec.domain) > 0) return Promise.resolve();
    return this.once(
      rec.domain,
      async () => {
        const at = this.d.now();
        this.d.store.domains.addOrder(rec.domain, at, at - HOUR);
        try {
          await this.order(rec.domain);
          if (!this.d.store.domains.update(rec.domain, rec.serverId, { reason: undefined, checkedAt: this.d.now() })) {
            await this.d.certs.remove(rec.domain); // detached while the order ran
            return;
          }
          this.d.log.info('custom domain certificate renewed', { domain: rec.domain, ms: this.d.now() - at });
        } catch (e) {
          this.d.log.warn('custom domain certificate renewal failed; the current one is kept', { domain: rec.domain, err: e });
          const reason = 'renewing the certificate failed; the current one is served and the order is tried again';
          this.d.store.domains.update(rec.domain, rec.serverId, { reason, checkedAt: this.d.now() });
        }
      },
      true,
    );
  }

  async stop(): Promise<void> {
    await Promise.allSettled([...this.running.values()]);
  }
}
