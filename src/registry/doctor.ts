// `rootbox doctor`'s rows for cluster mode: whether the registry answers, at which schema, which
// host answers writes; with this host's daemon running, that it is registered with a fresh lease,
// otherwise that its name is free; and how far this machine's clock is from the registry's (every
// lease and ledger time is the registry's, but expiries and metering periods are read against the
// host's own clock). A single box (no cluster.registry) gets one optional row saying so.

import { hostName } from '../config/index.js';
import { isAppError } from '../errors.js';
import { logWhere } from '../log/index.js';
import { HostDirectory, type HostRow } from './hosts.js';
import { readInstance } from './identity.js';
import { KNOWN_VERSION, schemaVersion } from './migrations.js';
import { RegistryPool } from './pool.js';
import { clockSkew } from './report.js';

/** Clock skew from the registry beyond which doctor complains (NTP keeps hosts within ms). */
export const CLOCK_SKEW_BOUND_MS = 2000;

export interface RegistryCheck {
  name: string;
  required: boolean;
  ok: boolean;
  detail: string;
  fix: string;
}

/** With the daemon not running: whether this data dir's daemon may start under its name
 *  (identity.ts): not while another host holds a running lease on it, nor when another data dir
 *  held it (without --replace-host). */
function nameCheck(name: string, me: HostRow | undefined, dataDir: string | undefined): RegistryCheck {
  const mine = dataDir ? readInstance(dataDir) : undefined;
  const other = !me?.up && me?.instance && me.instance !== mine;
  return {
    name: 'cluster host name',
    required: false,
    ok: !me?.up && !other,
    detail: me?.up
      ? `${name} holds a running lease (${me.advertise}) while this host's daemon is not running: another host has this name`
      : other
        ? `${name} is known from another data dir (instance ${me.instance}, last at ${me.advertise}): this daemon refuses to start under it`
        : `${name} ${me ? 'known, lease lapsed' : 'not registered yet'}`,
    fix: other
      ? "give each host its own cluster.host (ROOTBOX_HOST_NAME), or start this one once with --replace-host (that host's servers are marked lost, nothing deleted)"
      : 'give each host its own cluster.host (ROOTBOX_HOST_NAME)',
  };
}

export async function registryChecks(
  c: {
    registry?: string;
    host?: string;
    lease: number;
    connectTimeout: number;
    statementTimeout: number;
  },
  o: { daemonRunning?: boolean; now?: () => number; dataDir?: string } = {},
): Promise<RegistryCheck[]> {
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
    const host: RegistryCheck = o.daemonRunning
      ? {
          name: 'cluster host lease',
          required: true,
          ok: Boolean(me?.up),
          detail: me
            ? me.up
              ? `${name} registered (${me.advertise}), lease ${(me.leaseLeftMs / 1000).toFixed(1)} s left`
              : `${name} registered but its lease lapsed ${Math.round(-me.leaseLeftMs / 1000)} s ago: the running daemon does not renew it`
            : `${name} is not registered although its daemon runs`,
          fix: `check the daemon's log (${logWhere()}) and that this host reaches the registry`,
        }
      : nameCheck(name, me, o.dataDir);
    const skew = await clockSkew(pool, o.now);
    const off = Math.max(0, Math.abs(skew.skewMs) - skew.uncertaintyMs);
    const clock: RegistryCheck = {
      name: 'cluster clock',
      required: false,
      ok: off <= CLOCK_SKEW_BOUND_MS,
      detail: `this host's clock is ${Math.abs(skew.skewMs)} ms ${skew.skewMs >= 0 ? 'ahead of' : 'behind'} the registry's (±${skew.uncertaintyMs} ms; bound ${CLOCK_SKEW_BOUND_MS} ms)`,
      fix: 'run NTP (systemd-timesyncd or chrony) on every host and on the registry',
    };
    return [schema, host, clock];
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
