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

export function route(host: string, domain: string): Target {
  if (host === domain || host === `api.${domain}`) return { app: 'hosting' };
  if (host === `verify.${domain}`) return { app: 'verify' };
  if (host.endsWith(`.${domain}`)) {
    const slug = host.slice(0, -(domain.length + 1));
    if (/^[a-z0-9-]{1,63}$/.test(slug)) return { app: 'proxy', slug };
  }
  return { app: 'none', host };
}
