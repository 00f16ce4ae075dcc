// The cluster registry (DESIGN part 6): shared records in PostgreSQL. This part connects, checks
// the schema and the cluster token (a wrong one refuses the host before it writes anything; the
// secrets still in clear from before schema 14 are sealed then), claims this host's name for its
// instance (identity.ts: refused when another live instance holds it, or another data dir did
// without --replace-host) and keeps its row alive: registered at start, renewed every third of
// the lease, released on a clean stop. A registry that cannot be reached at start does not keep
// the host from serving what it has: it is checked and joined as soon as it answers; a registry
// with no schema or a newer one, a token that is not the registry's, or a name this host may not
// hold, is refused (at start: the daemon does not start; later: logged, not renewed, and nothing
// written under the name). A box that becomes a host copies its shared records in first (join.ts).

export { RegistryPool, redactUrl, isUnavailable } from './pool.js';
export { HostDirectory, type HostFacts, type HostRow } from './hosts.js';
export { HostDrains, type DrainMark, type DrainFailure } from './drains.js';
export { registryChecks, type RegistryCheck } from './doctor.js';
export { registryFacts, clusterPlacements, clockSkew, type RegistryFacts, type PlacementRow } from './report.js';
export { RegistryNames, type Placement, type StartAnswer } from './names.js';
export { WakeFence, type FenceAnswer, type FenceNames } from './fence.js';
export { claimName, instanceOf, INSTANCE_FILE, type HostIdentity } from './identity.js';
export { RegistryPayments } from './payments.js';
export { PlacementCache, type CachedPlacement, type HostView, type PlacementCacheOptions } from './placements.js';
export { FEED_CHANNEL } from './feed.js';
export { RegistryAccounts, clusterSecret, type SharedAccount, type SharedCode } from './accounts.js';
export { RegistryShared, type SharedCertificate, type ServerKey } from './shared.js';
export { keyedNames } from './keyednames.js';
export { RegistryQuotas, type ServerClaim } from './quotas.js';
export { RegistryLedger, type LedgerWrite, type AccountMoney, type LedgerRow } from './ledger.js';
export { RegistryCa, RegistryEdgeCa, EDGE_CA_SECRET, type CaPair } from './ca.js';
export { registryOptions, HOST_VERSION, type ClusterSettings, type RegistryOptions } from './host.js';
export { ClusterKeys, newToken, hasToken, storeToken, checkToken, sealClear, TOKEN_MIN } from './token.js';
export { clusterKeys, tokenFileOf } from './host.js';
export { migrate, schemaVersion, assertUsable, KNOWN_VERSION, MIGRATIONS } from './migrations.js';
export { Registry, startRegistry } from './registry.js';
export { RegistrySettings, SETTINGS_SQL, type ServerSettingsRow } from './settings.js';
export { SettingsWriter } from './settingswriter.js';
export { RegistryRecoveries, RECOVERY_SQL, type DeadPlacement, type DeadDomain, type RecoveryOutcome, type RecoveryRow } from './recoveries.js';
export { verdict, fenceStep, fenceBounds, type HostContact, type Verdict, type FenceStep } from './deadhost.js';
export { Contact, savedContact, type ContactDeps, type SavedContact } from './contact.js';
export { SelfFence, assertNotCutOff, type FencedServers, type SelfFenceOptions } from './selffence.js';
export { FenceSettlement, fenceStateFile } from './fencestate.js';
export { AskedMoves, askedDir, type AskedMove } from './asked.js';
export { joinRegistry, type BoxRecords, type BoxAccount, type BoxLedgerEntry, type JoinReport, type JoinOptions } from './join.js';
