// Public surface of the edge: listeners, TLS, Host dispatch.
export { Edge, type EdgeApps, type EdgeOptions } from './server.js';
export { TlsManager, type TlsOptions } from './tls.js';
export { hostOf, route, type Target } from './dispatch.js';
export { startTls, startEdge } from './part.js';
export { createCa, loadCa, issueLeaf, type Ca, type Issued } from './pki.js';
