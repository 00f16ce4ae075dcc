// `rootbox doctor`'s rows for cluster mode: whether the registry answers, at which schema, which
// host answers writes, and whether this host's name is free or already this host's. A single box
// (no cluster.registry) gets one optional row saying so.

import { hostName } from '../config/index.js';
import { isAppError } from '../errors.js';
import { HostDirectory } from './hosts.js';
import { KNOWN_VERSION, schemaVersion } from './migrations.js';
import { RegistryPool } from './pool.js';

export interface RegistryCheck {
  name: string;
  required: boolean;
  ok: boolean;
  detail: string;
  fix: string;
}

export async function registryChecks(c: {
  registry?: string;
  host?: string;
  lease: number;
  connectTimeout: number;
  statementTimeout: number;
}): Promise<RegistryCheck[]> {
  if (!c.registry)
    return [{ name: 'cluster registry', required: false, ok: true, detail: 'single box (cluster.registry unset): everything in this host’s LMDB', fix: '' }];
  const pool = new RegistryPool({ url: c.registry, connectTimeoutMs: c.connectTimeout, statementTimeoutMs: c.statementTimeout, max: 1 });
  const name = hostName(c.host);
  try {
    const v = await schemaVersion(pool);
    const schema: RegistryCheck = {
      name: 'cluster registry',
      required: true,
      ok: v === KNOWN_VERSION,
      detail: `${pool.where}: schema ${v || 'none'}${v === KNOWN_VERSION ? '' : `, this rootbox needs ${KNOWN_VERSION}`}`,
      fix: v > KNOWN_VERSION ? 'upgrade rootbox on this host' : 'rootbox cluster init',
    };
    if (!schema.ok) return [schema];
    const me = (await new HostDirectory(pool, c.lease).list()).find((h) => h.name === name);
    const host: RegistryCheck = {
      name: 'cluster host name',
      required: false,
      ok: !me?.up,
      detail: me?.up
        ? `${name} holds a running lease (${me.advertise}): another host with this name, or this host's daemon running`
        : `${name} ${me ? 'known, lease lapsed' : 'not registered yet'}`,
      fix: 'give each host its own cluster.host (ROOTBOX_HOST_NAME)',
    };
    return [schema, host];
  } catch (err) {
    return [
      {
        name: 'cluster registry',
        required: true,
        ok: false,
        detail: `${pool.where}: ${isAppError(err) ? err.detail : (err as Error).message}`,
        fix: 'check the URL, the password and that PostgreSQL listens',
      },
    ];
  } finally {
    await pool.end();
  }
}
