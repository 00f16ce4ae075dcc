// The cluster token of the tests (issue 35 item 2): every registry a test prepares is given this
// token's verifier, and every daemon in registry mode is given the token (startTestDaemon adds it
// to a cluster config that names neither `token` nor `tokenFile`).

import { ClusterKeys, migrate, storeToken, type RegistryPool } from '../../src/registry/index.js';

export const TEST_CLUSTER_TOKEN = 'rbx1_test-cluster-token-of-the-test-suite-0001';

/** The keys of the tests' token. */
export const testKeys = () => new ClusterKeys(TEST_CLUSTER_TOKEN);

/** What `rootbox cluster init` does to a registry that the tests need before a daemon joins it:
 *  the schema and the token's verifier. Answers the schema versions applied. */
export async function initRegistry(pool: RegistryPool): Promise<number[]> {
  const applied = await migrate(pool);
  await storeToken(pool, testKeys());
  return applied;
}

/** A cluster config with the tests' token unless it names a token or a token file itself. */
export function withToken<T>(cluster: T): T {
  const c = cluster as Record<string, unknown> | undefined;
  if (!c || typeof c !== 'object' || !c.registry || 'token' in c || 'tokenFile' in c) return cluster;
  return { ...c, token: TEST_CLUSTER_TOKEN } as T;
}

/** Registers `member` (a channel identity a test made) as a host of the registry with its key,
 *  as a host's start does: the owners' channel listeners take it from then on. */
export async function registerMember(pg: { sql(statement: string): Promise<string> }, member: { host: string; keyId: string }): Promise<void> {
  await pg.sql(
    `INSERT INTO hosts (name, advertise, public_ip, version, started_at, heartbeat_at, lease_until, channel_key)
     VALUES ('${member.host}', '127.0.0.1:1', '127.0.0.1', 'test', now(), now(), now(), '${member.keyId}')
     ON CONFLICT (name) DO UPDATE SET channel_key = EXCLUDED.channel_key`,
  );
}
