// Public surface of the subdomain edge (<slug>.{domain}): static files from /root/www without a
// wake, forwarding to the app on port 80, WebSockets, and waking a sleeping server on demand
// through the presence module's idle tracker (which also puts servers to sleep).
// `state(id)` is the truthful running/sleeping/waking state for the hosting API. The proxy is
// assembled, with the daemon's part, in part.ts.

export { createProxy, startProxy, type Proxy, type ProxyDeps } from './part.js';
export { storeSites, type Site, type Sites, type ServerLookup } from './sites.js';
export type { Upstream } from './forward.js';
export { sendErrorPage } from './pages.js';
