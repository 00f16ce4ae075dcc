// `rootbox cluster init | status | join | drain | undrain` (join: cli-join.ts; drain, undrain: cli-drain.ts): the registry's side of the operator's commands (DESIGN part 6).
// init applies the registry schema this rootbox knows (once, safe to repeat, run by the operator
// on purpose: a host never migrates at start) and sets up the cluster token, as k3s does: made
// here (or taken from cluster.token / ROOTBOX_CLUSTER_TOKEN / the token file), printed once and
// written to the token file (mode 0600); its verifier stored, every secret of the registry made
// or sealed under it (a registry from before schema 14 has them in clear: sealed here). An init
// given a token that is not the registry's changes nothing. status lists the hosts, their lease,
// capacity and servers, read straight from the registry (no daemon needed), and this host's
// channel to its peers (sessions up or down, errors, forwarded requests) asked of the running
// daemon over the admin socket (cli-channel.ts).

import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Config } from '../config/index.js';
import { AppError, isAppError } from '../errors.js';
import { createCa } from '../edge/index.js';
import {
  checkToken,
  ClusterKeys,
  clusterSecret,
  hasToken,
  KNOWN_VERSION,
  migrate,
  MIGRATIONS,
  newToken,
  RegistryCa,
  sealClear,
  storeToken,
  tokenFileOf,
  type RegistryPool,
} from '../registry/index.js';
import { clusterStatus } from './cli-channel.js';
import { drainCommand } from './cli-drain.js';
import { join } from './cli-join.js';
import { poolOf, type CliOut } from './cli-io.js';

/** Schema numbers below the newest that no change has (none is missing: each change was numbered
 *  when its work began, and some of those numbers were never used). */
export function unusedVersions(): number[] {
  const used = new Set(MIGRATIONS.map((m) => m.version));
  return Array.from({ length: KNOWN_VERSION }, (_, i) => i + 1).filter((v) => !used.has(v));
}

/** What init says of the unused numbers, so a reader of "applied 7, 8, 11" does not look for 9 and 10. */
function unusedNote(): string {
  const u = unusedVersions();
  if (!u.length) return '';
  const list = u.length === 1 ? `${u[0]} is` : `${u.slice(0, -1).join(', ')} and ${u.at(-1)} are`;
  return ` (schema ${list} unused: each change takes its number when its work begins, and ${u.length === 1 ? 'that one was' : 'those were'} never used; none is missing)`;
}

/** The common name of the cluster CA's certificate. */
const CLUSTER_CA = 'rootbox cluster CA';

export async function clusterCommand(
  cfg: Readonly<Config>,
  sub: string | undefined,
  flags: { json?: boolean },
  io: CliOut,
  args: string[] = [],
): Promise<number> {
  const drain = sub === 'drain' || sub === 'undrain';
  if (drain ? args.length !== 1 : args.length !== 0 || (sub !== 'init' && sub !== 'status' && sub !== 'join')) return -1;
  const pool = poolOf(cfg, io);
  if (!pool) return 1;
  try {
    if (drain) return await drainCommand(cfg, pool, sub, args[0], flags, io);
    if (sub === 'init') return await init(cfg, pool, flags, io);
    if (sub === 'join') return await join(cfg, pool, flags, io);
    return await clusterStatus(cfg, pool, flags, io);
  } catch (err) {
    io.err(`rootbox: ${isAppError(err) ? err.detail : (err as Error).message}`);
    return 1;
  } finally {
    await pool.end();
  }
}

/** The token the operator gave: cluster.token (ROOTBOX_CLUSTER_TOKEN), else the token file's. */
function givenToken(cfg: Readonly<Config>, file: string): string | undefined {
  if (cfg.cluster.token) return cfg.cluster.token;
  try {
    return readFileSync(file, 'utf8').trim() || undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw AppError.of('cluster_token_missing', `the token file ${file} cannot be read: ${(err as Error).message}`);
  }
}

async function init(cfg: Readonly<Config>, pool: RegistryPool, flags: { json?: boolean }, io: CliOut): Promise<number> {
  const file = tokenFileOf(cfg);
  const given = givenToken(cfg, file);
  const has = await hasToken(pool);
  if (!given && has)
    throw AppError.of(
      'cluster_token_missing',
      `the registry at ${pool.where} has a cluster token already: give it (cluster.token, ROOTBOX_CLUSTER_TOKEN or cluster.tokenFile) to run init again`,
    );
  const token = given ?? newToken();
  const keys = new ClusterKeys(token);
  // a wrong token is refused before anything is written
  if (has) await checkToken(pool, keys);
  if (!given) {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(file, `${token}\n`, { mode: 0o600, flag: 'wx' });
    chmodSync(file, 0o600);
  }
  let created: boolean;
  let applied: number[];
  let sealed: number;
  try {
    applied = await migrate(pool);
    await storeToken(pool, keys);
    await clusterSecret(pool, keys, true); // the api-key secret every host shares, made once
    // the cluster CA, made once: every host signs its channel certificate with it
    ({ created } = await new RegistryCa(pool, keys).ensure(() => ({ name: CLUSTER_CA, ...createCa(CLUSTER_CA) })));
    sealed = await sealClear(pool, keys);
  } catch (err) {
    if (!given) rmSync(file, { force: true }); // another init's token won: this one opens nothing
    throw err;
  }
  if (flags.json)
    io.out(
      JSON.stringify({
        registry: pool.where,
        applied,
        schema: KNOWN_VERSION,
        unused: unusedVersions(),
        caCreated: created,
        sealed,
        ...(given ? {} : { token, tokenFile: file }),
      }),
    );
  else {
    io.out(
      (applied.length
        ? `registry ${pool.where}: applied schema ${applied.join(', ')}; now at ${KNOWN_VERSION}${unusedNote()}`
        : `registry ${pool.where}: schema ${KNOWN_VERSION}, current${unusedNote()}`) +
        (created ? '; cluster CA created' : '') +
        (sealed ? `; ${sealed} secret${sealed === 1 ? '' : 's'} sealed under the cluster token` : ''),
    );
    if (!given)
      io.out(`cluster token (shown once, written to ${file}): ${token}\nevery host needs it: cluster.token, ROOTBOX_CLUSTER_TOKEN or cluster.tokenFile`);
  }
  return 0;
}
