// `rootbox cluster init | status`: the registry's side of the operator's commands (DESIGN part 6).
// init applies the registry schema this rootbox knows (once, safe to repeat, run by the operator
// on purpose: a host never migrates at start); status lists the hosts, their lease and capacity,
// read straight from the registry (no daemon needed).

import type { Config } from '../config/index.js';
import { isAppError } from '../errors.js';
import { createCa } from '../edge/index.js';
import { clusterSecret, KNOWN_VERSION, migrate, RegistryCa, schemaVersion, HostDirectory } from '../registry/index.js';
import { poolOf, type CliOut } from './cli-io.js';
import { bytes, table } from './table.js';

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
    const schema = await schemaVersion(pool);
    const hosts = schema ? await new HostDirectory(pool, cfg.cluster.lease).list() : [];
    if (flags.json) {
      io.out(JSON.stringify({ registry: pool.where, schema, hosts }));
      return 0;
    }
    io.out(`registry ${pool.where}: schema ${schema || 'none (run rootbox cluster init)'}, ${hosts.filter((h) => h.up).length} of ${hosts.length} hosts up`);
    if (hosts.length)
      io.out(
        table(
          ['HOST', 'STATE', 'LEASE', 'SERVERS', 'ADVERTISE', 'PUBLIC IP', 'FREE RAM', 'FREE DISK', 'VERSION'],
          hosts.map((h) => [
            h.name,
            h.up ? 'up' : 'down',
            h.up ? `${(h.leaseLeftMs / 1000).toFixed(1)} s left` : `lapsed ${Math.round(-h.leaseLeftMs / 1000)} s ago`,
            String(h.servers),
            h.advertise,
            h.publicIp,
            bytes(h.capacity.memoryFreeBytes),
            bytes(h.capacity.diskFreeBytes),
            h.version,
          ]),
        ),
      );
    return 0;
  } catch (err) {
    io.err(`rootbox: ${isAppError(err) ? err.detail : (err as Error).message}`);
    return 1;
  } finally {
    await pool.end();
  }
}
