// `rootbox cluster join`: a box becomes a cluster host with everything it has (registry/join.ts):
// its accounts, key hashes, phones, ledger and balances, custom domains and certificates copied
// into the registry ROOTBOX_REGISTRY names, once; the daemon does the same at its first start in
// cluster mode, so this command is for an operator who wants the copy (and any refusal, naming
// the records another host holds) before switching the daemon over, with the daemon stopped (one
// serving as a single box would write records after the copy). Safe to repeat and to run again
// after an interruption; a box that joined says so and writes nothing.

import type { Config } from '../config/index.js';
import { hostName } from '../config/index.js';
import { createLogger } from '../log/index.js';
import { boxRecords } from '../hosting/index.js';
import { assertUsable, checkToken, clusterKeys, joinRegistry, type RegistryPool } from '../registry/index.js';
import { openStore } from '../store/index.js';
import type { CliOut } from './cli-io.js';
import { assertStoreFree } from './cli-link.js';

export async function join(cfg: Readonly<Config>, pool: RegistryPool, flags: { json?: boolean }, io: CliOut): Promise<number> {
  const keys = clusterKeys(cfg);
  await assertUsable(pool);
  await checkToken(pool, keys); // a wrong token is refused before anything is written
  const host = hostName(cfg.cluster.host);
  // a daemon still serving as a single box would write accounts after the copy, under the mark
  assertStoreFree(cfg.dataDir, 'cluster join');
  const store = openStore(cfg.dataDir);
  try {
    const r = await joinRegistry({ pool, host, keys, box: boxRecords(store, cfg.dataDir), log: createLogger({ level: 'warn' }) });
    if (flags.json) io.out(JSON.stringify({ registry: pool.where, host, ...r }));
    else if (r.already) io.out(`${cfg.dataDir} joined the cluster before (as ${store.joined.get()?.host}): nothing to copy`);
    else
      io.out(
        `${cfg.dataDir} joined the registry ${pool.where} as ${host}: ${r.accounts} accounts (${r.entries} new ledger entries), ${r.domains} custom domains, ${r.certificates} certificates, ${r.payments} payment locks copied; its servers are placed when the daemon starts in cluster mode`,
      );
    return 0;
  } finally {
    await store.close();
  }
}
