// Public surface of the hosting API (api.{domain} and {domain}): the routes of
// spec/hosting-service.md with the decisions of DESIGN.md part 2, declared in routes.ts,
// recharge.ts and feedback.ts. Every route but /create, /feedback, /healthz and /openapi.json
// needs `Authorization: Bearer <api_key>`. The service (router, auth, rate limits) is in
// service.ts, the daemon's part (main.ts) in part.ts.

export { HOSTING_SERVICE, createHostingService, type HostingApi } from './service.js';
export { startHosting } from './part.js';
export type { HostingDeps, HostingCore } from './core.js';
export type { ServerForwarding, PlacementToForward } from './elsewhere.js';
export type { HostChoice } from './hostchoice.js';
export { shortOf, type Capacity } from './capacity.js';
export type { Credits, KeyPair } from './servers.js';
export type { PortListener } from './expose.js';
export { TIER_LIMITS, tierOf, type Tier } from './accounts.js';
export { ExecRequest, ExecAnswer, ExecLine, execute, startExec, type ExecSettings } from './exec.js';
export { Files } from './files.js';
export { watchPlacedAway } from './stalecopies.js';
export { checkpointView } from './checkpointroutes.js';
export { FilesQuery, ArchiveQuery, FileList, FileEntry, Written } from './fileshapes.js';
export type { Commands, Running } from './commands.js';
export { boxRecords } from './joinbox.js';
