// Host dispatch: which app answers a request, from its Host (or :authority) header.
// {domain} and api.{domain} → hosting; verify.{domain} → verification; <slug>.{domain} → proxy.

export type Target = { app: 'hosting' } | { app: 'verify' } | { app: 'proxy'; slug: string } | { app: 'none'; host: string };

/** Lowercased host without port or trailing dot; '' when absent or malformed. */
export function hostOf(raw: string | string[] | undefined): string {
  if (typeof raw !== 'string' || raw.length > 300) return '';
  let h = raw.trim().toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    return end > 0 ? h.slice(0, end + 1) : '';
  }
  const colon = h.indexOf(':');
  if (colon >= 0) h = h.slice(0, colon);
  return h.replace(/\.$/, '');
}

const HOSTING: Target = Object.freeze({ app: 'hosting' });
const VERIFY: Target = Object.freeze({ app: 'verify' });
const SLUG = /^[a-z0-9-]{1,63}$/;

export function route(host: string, domain: string): Target {
  const n = host.length - domain.length;
  if (n >= 0 && host.endsWith(domain)) {
    if (n === 0) return HOSTING;
    if (host.charCodeAt(n - 1) === 46 /* . */) {
      const sub = host.slice(0, n - 1);
      if (sub === 'api') return HOSTING;
      if (sub === 'verify') return VERIFY;
      if (SLUG.test(sub)) return { app: 'proxy', slug: sub };
    }
  }
  return { app: 'none', host };
}
