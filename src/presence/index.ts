// Public surface of sleep and wake: the idle tracker (the daemon's one Presence: wake once, hold,
// touch, sleep after idleTimeout, the truthful `waking` state) and the exposed TCP ports, which
// wake and hold the server behind them. The proxy, the SSH server and hosting use these through
// the `Presence` / `PresenceState` interfaces; main.ts starts the tracker before them.
export type { Presence, PresenceState } from './types.js';
export { IdleTracker, type IdleOptions } from './idle.js';
export { TcpExposer, type TcpExposerDeps } from './tcp.js';
export { startPresence, createPorts } from './part.js';
