// `rootbox servers list --cluster`: every server of the cluster as the registry places it (host,
// slug, server id, epoch, account, the owner's public address), read straight from the registry,
// so it answers on any host, daemon running or not. `--account` takes an acc_ id (the registry
// knows accounts by id; a slug is resolved by this host's store only, so it is not offered here).

import type { Config } from '../config/index.js';
import { isAppError } from '../errors.js';
import { clusterPlacements } from '../registry/index.js';
import { poolOf } from './cli-io.js';
import type { CliFlags, CliOut } from './cli-io.js';
import { day, table } from './table.js';

export async function clusterList(cfg: Readonly<Config>, flags: CliFlags, io: CliOut): Promise<number> {
  const pool = poolOf(cfg, io);
  if (!pool) return 1;
  try {
    const placements = await clusterPlacements(pool, flags.account);
    if (flags.json) io.out(JSON.stringify({ registry: pool.where, placements }, null, 2));
    else
      io.out(
        placements.length
          ? table(
              ['HOST', 'SLUG', 'SERVER', 'EPOCH', 'ACCOUNT', 'PUBLIC IP', 'PLACED'],
              placements.map((p) => [p.host, p.slug, p.server_id, String(p.epoch), p.account_id, p.public_ip, day(p.placed_at)]),
            )
          : `no servers placed in the registry ${pool.where}`,
      );
    return 0;
  } catch (err) {
    io.err(`rootbox: ${isAppError(err) ? err.detail : (err as Error).message}`);
    return 1;
  } finally {
    await pool.end();
  }
}
