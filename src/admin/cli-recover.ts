// `rootbox cluster recover HOST` (issue 38 item 3): the operator's word that a host is dead — its
// servers re-placed on the other hosts from their newest checkpoints, asked of the running daemon
// over the admin socket (moves/recover.ts does it; refused while the host's lease runs or a peer
// reached it lately), with cluster.recoverAfter 0 only with --force (no host fences itself then). And the recoveries `cluster status` lists from the registry.

import type { Config } from '../config/index.js';
import { isAppError } from '../errors.js';
import { RegistryRecoveries, type RecoveryRow } from '../registry/index.js';
import type { RegistryPool } from '../registry/index.js';
import { ask, needDaemon, ok } from './cli-link.js';
import type { CliOut } from './cli-io.js';
import { table } from './table.js';

interface Report {
  host: string;
  recovered: { server: string; slug: string; to: string; checkpoint: string; lost_ms?: number }[];
  unrecoverable: { server: string; slug: string; why: string }[];
  failed: { server: string; slug: string; why: string }[];
}

export async function recoverCommand(cfg: Readonly<Config>, host: string, flags: { json?: boolean; force?: boolean }, io: CliOut): Promise<number> {
  try {
    const a = await ask(cfg.dataDir, 'POST', '/cluster/recover', flags.force ? { host, force: true } : { host });
    if (!a) needDaemon(cfg.dataDir, 'cluster recover');
    const r = ok<{ recovery: Report }>(a).recovery;
    if (flags.json) {
      io.out(JSON.stringify({ recovery: r }));
      return r.failed.length || r.unrecoverable.length ? 1 : 0;
    }
    io.out(`host ${r.host}: ${r.recovered.length} servers recovered, ${r.unrecoverable.length} cannot be, ${r.failed.length} failed`);
    for (const s of r.recovered)
      io.out(
        `  ${s.server} (${s.slug}) → ${s.to} from ${s.checkpoint}${s.lost_ms !== undefined ? `; it ran ${Math.round(s.lost_ms / 1000)} s after it (lost, its owner is told)` : ''}`,
      );
    for (const s of r.unrecoverable) io.out(`  ${s.server} (${s.slug}) cannot be recovered: ${s.why}`);
    for (const s of r.failed) io.out(`  ${s.server} (${s.slug}) failed: ${s.why}`);
    return r.failed.length || r.unrecoverable.length ? 1 : 0;
  } catch (err) {
    io.err(`rootbox: ${isAppError(err) ? err.detail : (err as Error).message}`);
    return 1;
  }
}

/** The registry's recoveries (schema 24), newest first; none before it. */
export async function recoveriesOf(pool: RegistryPool, schema: number): Promise<RecoveryRow[]> {
  return schema >= 24 ? new RegistryRecoveries(pool, '').list(50) : [];
}

/** `cluster status`'s lines of them (the servers a dead host left unrecovered first). */
export function recoveryLines(rows: RecoveryRow[]): string {
  if (!rows.length) return 'recoveries: none';
  const order = { unrecoverable: 0, failed: 1, recovered: 2 } as const;
  const sorted = [...rows].sort((a, b) => order[a.outcome] - order[b.outcome]);
  return [
    'recoveries of dead hosts’ servers:',
    table(
      ['SERVER', 'FROM', 'TO', 'OUTCOME', 'AT', 'DETAIL'],
      sorted.map((x) => [x.server_id, x.from_host, x.to_host ?? '-', x.outcome, x.at.replace(/\.\d+Z$/, 'Z'), x.detail]),
    ),
  ].join('\n');
}
