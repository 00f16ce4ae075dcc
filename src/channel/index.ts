// Public surface of the host-to-host channel (issue 29, DESIGN part 6): in cluster mode each host
// listens on cluster.listen with mutual TLS under the cluster CA (made by `rootbox cluster init`,
// read from the registry; this host's certificate issued at start and reissued before it ends, on
// one key pair per run whose public key the host registers: a peer is taken only with the key
// its host registered),
// and its edge forwards `<slug>.{domain}` requests and WebSockets (and those for servers' own
// domains, every host knowing the cluster's) for servers of other hosts to
// their owner over one kept-alive HTTP/2 session per peer. A single box has no channel; a
// registry without a CA yet (never initialised by this version) leaves forwarding off, said once
// in the log. A start whose CA read or key registration fails (the registry away a moment, this
// run's name not claimed yet) is tried again with a back-off (START_RETRY_MS doubling up to
// START_RETRY_MAX_MS) until it is up; meanwhile requests for servers of other hosts answer 503
// host_unavailable and the listener is not open.

export { startChannel, START_RETRY_MS, START_RETRY_MAX_MS, type ChannelPartDeps } from './part.js';
export type { Channel } from './channel.js';
export type { Placements, PlacementToRoute, HostView } from './lookup.js';
export { issueIdentity, type Identity } from './identity.js';
export type { ApiApp, ApiForwardOptions } from './sender-api.js';
export type { SshClient } from './sender-ssh.js';
export type { SshAcceptor } from './owner-ssh.js';
export type { PeerHealth, ForwardOutcome, ChannelErrorKind } from './sender-health.js';
export type { RetryBudget } from './sender-body.js';
