// `rootbox cluster drain HOST` and `cluster undrain HOST` (issue 38 item 2): the operator's side of
// a drain, written straight into the registry's hosts row (no daemon needed, from any host). The
// draining host's daemon reads the mark within a second, takes no more creates and moves its
// servers to the others (moves/drain.ts); `cluster status` shows the progress (drainLines).

import type { Config } from '../config/index.js';
import { AppError } from '../errors.js';
import { assertUsable, HostDirectory, HostDrains, type HostRow, type RegistryPool } from '../registry/index.js';
import type { CliOut } from './cli-io.js';

const at = (d: Date | string): string => new Date(d).toISOString().slice(0, 19).replace('T', ' ');

export async function drainCommand(
  cfg: Readonly<Config>,
  pool: RegistryPool,
  sub: 'drain' | 'undrain',
  host: string,
  flags: { json?: boolean },
  io: CliOut,
): Promise<number> {
  await assertUsable(pool);
  const drains = new HostDrains(pool);
  const done = sub === 'drain' ? await drains.mark(host) : await drains.clear(host);
  if (!done) throw AppError.of('drain_host_unknown', `the cluster has no host ${host.slice(0, 80)}`);
  const row = (await new HostDirectory(pool, cfg.cluster.lease).list()).find((h) => h.name === host)!;
  if (flags.json) {
    io.out(JSON.stringify({ host, draining: !!row.drain, since: row.drain?.since ?? null, left: row.servers, up: row.up }));
    return 0;
  }
  if (sub === 'drain')
    io.out(
      `${host} is draining since ${at(row.drain!.since)}: it takes no creates, and its ${row.servers} server${row.servers === 1 ? '' : 's'} move to the other hosts` +
        (row.up ? '' : ` once it runs again (it is down now)`) +
        '; rootbox cluster status shows the progress, rootbox cluster undrain reopens it',
    );
  else io.out(`${host} takes creates again (${row.servers} server${row.servers === 1 ? '' : 's'} on it; moves under way finish)`);
  return 0;
}

/** The drains under way, for `cluster status`: moved, left, failed with why. */
export function drainLines(hosts: HostRow[]): string[] {
  const out: string[] = [];
  for (const h of hosts) {
    if (!h.drain) continue;
    const failed = Object.entries(h.drain.failed);
    out.push(
      `drain of ${h.name} since ${at(h.drain.since)}: ${h.drain.moved} moved, ${h.servers} left, ${failed.length} failed` +
        (h.servers === 0 ? ' (done: nothing left on it)' : failed.length ? ' (tried again)' : ''),
    );
    for (const [id, f] of failed) out.push(`  ${id}: ${f.why} (${f.attempts} attempt${f.attempts === 1 ? '' : 's'}, last ${at(f.at)})`);
  }
  return out;
}
