// Entry of the operator commands of bin/rootbox (src/cli.ts hands them over as they came):
// servers, accounts, status, backup, restore — and `admin credit`, kept for scripts written for it.
// Exit status: 0 done, 1 refused or failed (the reason on stderr), 2 wrong usage.

import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { DEFAULT_CONFIG_FILE, loadConfig } from '../config/index.js';
import { accountsCommand } from './cli-accounts.js';
import { clusterCommand } from './cli-cluster.js';
import { recoverCommand } from './cli-recover.js';
import type { CliOut } from './cli-io.js';
import { serversCommand } from './cli-servers.js';
import { rebuildCommand } from './cli-rebuild.js';
import { backupCommand, restoreCommand, statusCommand } from './cli-status.js';
import { locateDataDir } from './whereabouts.js';

export const ADMIN_USAGE = `operator commands (act in the running daemon through <dataDir>/admin.sock; root only):
  servers list [--account ACC] [--json]   every server: state, tier, RAM, disk, flags
  servers list --cluster [--account ACC] [--json]
                                          cluster mode: every host's placements from the registry
                                          (host, slug, server id, epoch, account)
  servers show SERVER [--json]            one server (id, slug or subdomain) and its account
  servers stop SERVER                     put it to sleep now (the next visitor wakes it)
  servers start SERVER                    wake it
  servers suspend SERVER                  stop it; its subdomain answers 402 and SSH is refused until resumed
  servers resume SERVER                   end the suspension and start it
  servers delete SERVER --yes             delete it with its disk and exposed ports
  servers checkpoints SERVER [--json]     its checkpoints, newest first
  servers restore SERVER CHECKPOINT       make its disk the checkpoint's (it restarts when running)
  servers move SERVER --to HOST [--json]  cluster mode, on the host that runs it: move it to HOST (slug, keys,
                                          disk, never_sleep; exposed ports get new public ones); needs an S3 store
  accounts list [--json]                  every account: tier, balance, what is left of the grant
  accounts show ACCOUNT [--json]          one account (or a server's account), its servers and ledger
  accounts credit ACCOUNT|SERVER USD      add credit; running servers get the new tier's ceilings at once
  accounts rotate-key ACCOUNT             a new api_key (printed once); the old one stops working
  accounts revoke ACCOUNT                 the api_key stops working; no new one is printed
  status [--json]                         daemon and its parts, servers by state, host headroom, registry,
                                          certificate expiry, payments/LLM/SMS configured or not
  backup FILE [--json]                    consistent snapshot of the store while the daemon serves
  restore FILE [--json]                   put a backup in place of the store (daemon stopped)
  restore --from-backup FILE --store s3://BUCKET/PREFIX [--host-key FILE] [--json]
                                          rebuild a lost box into a fresh data dir: the backup's accounts,
                                          balances, servers and host keys, each server's disk from its
                                          newest checkpoint in the store (checkpoints.s3.*, AWS_* credentials)
  cluster init [--json]                   apply the registry schema (cluster.registry) this rootbox knows; safe to repeat
  cluster status [--json]                 the registry's hosts: lease, where they are reached, servers, room
                                          (RAM and disk left under the servers' ceilings), free RAM and disk;
                                          drains (moved, left, failed with why); this host's channel to its
                                          peers (from the daemon: sessions, errors, forwarded requests)
  cluster join [--json]                   copy this box's accounts, ledger, domains, certificates into the registry (once; the daemon does it at its first cluster start)
  cluster drain HOST [--json]             HOST takes no creates and moves every server to the other hosts (needs an S3
                                          store), a few at a time; resumes after a restart
  cluster undrain HOST [--json]           HOST takes creates again (moves under way finish)
  cluster recover HOST [--force] [--json] re-place a dead host's servers (its lease lapsed, no peer reached it lately)
                                          on the others from their newest checkpoints in the S3 store; with
                                          cluster.recoverAfter 0 (no self-fence) only with --force: make sure HOST
                                          is down first, or its servers run on two hosts with diverging disks
With the daemon stopped, list/show/status read the store, credit writes it, and the other
commands refuse. --config FILE or ROOTBOX_DATA_DIR select the data dir (else /etc/rootbox/config.json,
else ./var when it holds a store, else the data dir of the daemon running on this machine).`;

const KNOWN = new Set(['servers', 'accounts', 'admin', 'status', 'backup', 'cluster', 'restore']);

const stdio: CliOut = {
  out: (t) => process.stdout.write(t + '\n'),
  err: (t) => process.stderr.write(t + '\n'),
};

/** Runs `argv` (command first) with the configuration `env` gives (the process's by default),
 *  writing to `io`; -1 when it is no operator command of this module. */
export async function adminMain(argv: string[], io: CliOut = stdio, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      config: { type: 'string' },
      json: { type: 'boolean' },
      yes: { type: 'boolean' },
      force: { type: 'boolean' },
      account: { type: 'string' },
      cluster: { type: 'boolean' },
      'from-backup': { type: 'string' },
      store: { type: 'string' },
      'host-key': { type: 'string' },
      to: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
  });
  const [cmd, sub, ...rest] = positionals;
  if (values.help) {
    io.out(ADMIN_USAGE);
    return 0;
  }
  let cfg = loadConfig({ file: values.config, env });
  // run outside the daemon's working dir with no config: the running daemon's data dir (whereabouts.ts)
  const explicit = values.config !== undefined || !!env.ROOTBOX_CONFIG || !!env.ROOTBOX_DATA_DIR || existsSync(DEFAULT_CONFIG_FILE);
  const where = KNOWN.has(cmd) ? await locateDataDir({ dataDir: cfg.dataDir, explicit, runDir: cfg.runDir }) : { dataDir: cfg.dataDir };
  if ('error' in where) {
    // a first `cluster init` or a restore into a new data dir may well have no daemon to find
    if (cmd !== 'cluster' && cmd !== 'restore') {
      io.err(where.error);
      return 1;
    }
  } else if (where.note) {
    io.err(where.note);
    cfg = loadConfig({ file: values.config, env, overrides: { dataDir: where.dataDir } });
  }
  const flags = { json: values.json, yes: values.yes, force: values.force, account: values.account, cluster: values.cluster, to: values.to };
  let code = -1;
  switch (cmd) {
    case 'servers':
      code = await serversCommand(cfg, sub, rest, flags, io);
      break;
    case 'accounts':
      code = await accountsCommand(cfg, sub, rest, flags, io);
      break;
    case 'admin': // the older spelling of `accounts credit`
      if (sub === 'credit') code = await accountsCommand(cfg, 'credit', rest, flags, io);
      break;
    case 'status':
      if (sub === undefined) code = await statusCommand(cfg, flags, io);
      break;
    case 'backup':
      if (sub !== undefined && rest.length === 0) code = await backupCommand(cfg, sub, flags, io);
      break;
    case 'cluster':
      if (sub === 'recover' && rest.length === 1) code = await recoverCommand(cfg, rest[0], flags, io);
      else code = await clusterCommand(cfg, sub, flags, io, rest);
      break;
    case 'restore': {
      const from = values['from-backup'];
      if (from !== undefined && sub === undefined) {
        const store = values.store;
        const c = store === undefined ? cfg : loadConfig({ file: values.config, env, overrides: { dataDir: cfg.dataDir, checkpoints: { store } } });
        code = await rebuildCommand(c, { file: from, hostKey: values['host-key'], env }, flags, io);
      } else if (sub !== undefined && rest.length === 0 && values.store === undefined) code = await restoreCommand(cfg, sub, flags, io);
      break;
    }
  }
  if (code === -1) {
    io.err(`rootbox: unknown command '${positionals.join(' ')}'\n\n${ADMIN_USAGE}`);
    return 2;
  }
  return code;
}
