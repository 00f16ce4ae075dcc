// bin/rootbox: the command line. `serve` runs the daemon in the foreground; `doctor` checks the
// host (src/ops/: doctor, install, image); servers, accounts, status, backup, restore (and `admin credit`) are the operator's
// commands (src/admin/); `config docs` prints the configuration reference; `config show` the
// effective config.

import { parseArgs } from 'node:util';
import { configReference, loadConfig } from './config/index.js';
import { isAppError } from './errors.js';
import { serve } from './main.js';
import { redactUrl } from './registry/index.js';

/** First words handed to src/admin/ (operator commands; `admin credit` is the older spelling). */
const ADMIN_COMMANDS = new Set(['servers', 'accounts', 'status', 'backup', 'restore', 'admin', 'cluster']);

const USAGE = `usage: rootbox <command> [--config FILE]

commands:
  install        (root, from the checkout) install the program, config (ports 80, 443, 22 when
                 free), image and systemd unit (rootbox install --help); uninstall removes them,
                 data kept unless --purge
  serve          run the daemon in the foreground (embedded defaults when no config);
                 --replace-host takes the cluster host name over from the data dir that held
                 it (its servers are marked lost, nothing deleted)
  doctor         check this host for what rootbox needs; exit 1 when something required is missing
  image build    build the base server image with debootstrap unless cached (--force rebuilds;
                 --log FILE keeps debootstrap's and apt's output in FILE, printing one line per step)
  image list     list built images and the servers using each
  image prune    remove images no server of this data dir uses (the current one is kept)
  servers | accounts | status | backup | restore
                 operate the host through the running daemon (rootbox servers --help)
  cluster init | status | join | drain HOST | undrain HOST
                 the cluster registry (cluster.registry): apply its schema, list its hosts,
                 copy this box's accounts, ledger, domains and certificates into it, empty a
                 host of its servers (drain) and reopen it (undrain)
  dev clean      remove what a stopped development run left on the host: its containers,
                 the mounts and loop devices under the data dir, lxcfs, the bridge and the nft
                 tables (the data is kept unless --purge); refused while a daemon runs on them
  config docs    print the configuration reference (Markdown)
  config show    print the effective configuration (secrets hidden)
  metrics docs   print the metrics reference (Markdown)
`;

/** Whether this data dir's daemon answers on its admin socket (doctor: whose lease is this host's). */
async function daemonAnswers(dataDir: string): Promise<boolean> {
  const { callAdmin } = await import('./admin/index.js');
  return callAdmin(dataDir, 'GET', '/status', undefined, 10_000).then(
    (a) => a?.status === 200,
    () => false,
  );
}

async function main(argv: string[]): Promise<number> {
  if (ADMIN_COMMANDS.has(argv.find((a, i) => !a.startsWith('-') && argv[i - 1] !== '--config') ?? ''))
    return (await import('./admin/index.js')).adminMain(argv);
  if (argv[0] === 'install' || argv[0] === 'uninstall') return (await import('./ops/index.js')).installCommand(argv);
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      config: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
      force: { type: 'boolean' },
      log: { type: 'string' },
      purge: { type: 'boolean' },
      'replace-host': { type: 'boolean' },
    },
    allowPositionals: true,
  });
  const [cmd, sub] = positionals;
  if (values.help || !cmd) {
    process.stdout.write(USAGE);
    return cmd || values.help ? 0 : 2;
  }
  switch (cmd) {
    case 'serve': {
      // --replace-host: this start takes the cluster name over from the data dir that held it
      const cfg = loadConfig({ file: values.config, overrides: values['replace-host'] ? { cluster: { replaceHost: true } } : undefined });
      (await import('./runtime/index.js')).assertServable(cfg); // before any part touches the data dir
      await serve(cfg);
      return -1; // keep running
    }
    case 'doctor': {
      const { runDoctor } = await import('./ops/index.js');
      const cfg = loadConfig({ file: values.config });
      const hostNames = await (await import('./runtime/index.js')).hostNamesCheck(cfg);
      const payments = await (await import('./payments/index.js')).paymentChecks(cfg.verify.x402);
      const daemonRunning = cfg.cluster.registry ? await daemonAnswers(cfg.dataDir) : false;
      const registry = await (await import('./registry/index.js')).registryChecks(cfg.cluster, { daemonRunning, dataDir: cfg.dataDir });
      return runDoctor(cfg, [hostNames, ...payments, ...registry]);
    }
    case 'dev':
      if (sub === 'clean') {
        await (await import('./runtime/index.js')).cleanHost(loadConfig({ file: values.config }), (l) => process.stdout.write(l + '\n'), values.purge === true);
        return 0;
      }
      break;
    case 'image':
      if (sub === 'build' || sub === 'list' || sub === 'prune') {
        const { imageCommand } = await import('./ops/index.js');
        return imageCommand(loadConfig({ file: values.config }), sub, values.force === true, (t) => process.stdout.write(t), values.log);
      }
      break;
    case 'metrics':
      if (sub === 'docs') {
        process.stdout.write((await import('./metrics/index.js')).metricsReference() + '\n');
        return 0;
      }
      break;
    case 'config':
      if (sub === 'docs') {
        process.stdout.write(configReference() + '\n');
        return 0;
      }
      if (sub === 'show') {
        const cfg = loadConfig({ file: values.config });
        const hidden = (k: string, v: unknown) =>
          k === 'facilitatorHeaders' && v && typeof v === 'object' ? Object.fromEntries(Object.keys(v).map((h) => [h, '[set]'])) : v;
        process.stdout.write(
          JSON.stringify(
            cfg,
            (k, v) =>
              /key|token|secret/i.test(k) && typeof v === 'string' ? '[set]' : k === 'registry' && typeof v === 'string' ? redactUrl(v) : hidden(k, v),
            2,
          ) + '\n',
        );
        return 0;
      }
      break;
  }
  process.stderr.write(`rootbox: unknown command '${positionals.join(' ')}'\n\n${USAGE}`);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`rootbox: ${isAppError(err) ? err.detail : ((err as Error).stack ?? String(err))}\n`);
    process.exitCode = 1;
  },
);
