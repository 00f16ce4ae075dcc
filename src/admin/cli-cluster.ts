// `rootbox cluster init | status`: the registry's side of the operator's commands (DESIGN part 6).
// init applies the registry schema this rootbox knows (once, safe to repeat, run by the operator
// on purpose: a host never migrates at start); status lists the hosts, their lease, capacity and
// servers, read straight from the registry (no daemon needed), and this host's channel to its
// peers (sessions up or down, errors, forwarded requests) asked of the running daemon over the
// admin socket (cli-channel.ts).

import type { Config } from '../config/index.js';
import { isAppError } from '../errors.js';
import { createCa } from '../edge/index.js';
import { clusterSecret, KNOWN_VERSION, migrate, RegistryCa } from '../registry/index.js';
import { clusterStatus } from './cli-channel.js';
import { poolOf, type CliOut } from './cli-io.js';

/** The common name of the cluster CA's certificate. */
const CLUSTER_CA = 'rootbox cluster CA';

export async function clusterCommand(cfg: Readonly<Config>, sub: string | undefined, flags: { json?: boolean }, io: CliOut): Promise<number> {
  if (sub !== 'init' && sub !== 'status') return -1;
  const pool = poolOf(cfg, io);
  if (!pool) return 1;
  try {
    if (sub === 'init') {
      const applied = await migrate(pool);
      await clusterSecret(pool, true); // the api-key secret every host shares, made once
      // the cluster CA, made once: every host signs its channel certificate with it
      const { created } = await new RegistryCa(pool).ensure(() => ({ name: CLUSTER_CA, ...createCa(CLUSTER_CA) }));
      if (flags.json) io.out(JSON.stringify({ registry: pool.where, applied, schema: KNOWN_VERSION, caCreated: created }));
      else
        io.out(
          (applied.length
            ? `registry ${pool.where}: applied schema ${applied.join(', ')}; now at ${KNOWN_VERSION}`
            : `registry ${pool.where}: schema ${KNOWN_VERSION}, current`) + (created ? '; cluster CA created' : ''),
        );
      return 0;
    }
    return await clusterStatus(cfg, pool, flags, io);
  } catch (err) {
    io.err(`rootbox: ${isAppError(err) ? err.detail : (err as Error).message}`);
    return 1;
  } finally {
    await pool.end();
  }
}
