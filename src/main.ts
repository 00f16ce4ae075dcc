// Composition root: load config, open the store, build the runtime, the apps and the edge,
// start the parts in order (rolling back on failure), and wire signals (SIGTERM/SIGINT:
// graceful stop; SIGHUP: reload TLS). Containers keep running when the daemon stops.
//
// Start order — each part uses only parts started before it, so no wiring refers to a part that
// does not exist yet: store → payments → tls → acme (stored certificates installed, the host's own
// ordered or renewed in the background) → lxcfs (the servers' /proc view, before any boot)
// → runtime → oom (OOM kills told to the server's user) → presence (idle tracker) → billing (built;
// settled recharges credited) → proxy → ports (exposed TCP) → ssh → hosting (registers itself as
// billing's tier keeper, reopens ports, applies tiers) → metering (billing's loop) → edge → admin
// → metrics (its own loopback listener; scrape-time gauges read the runtime and the data dir).

import { createAcme, type Acme } from './acme/index.js';
import { startAdmin, type AdminListener } from './admin/index.js';
import { Billing, runtimeUsage } from './billing/index.js';
import type { Config } from './config/index.js';
import type { CertIssuer } from './domains/index.js';
import { Edge, TlsManager } from './edge/index.js';
import { createHostingService, type HostingApi } from './hosting/index.js';
import { startAll, type Part } from './lifecycle.js';
import { createLlm } from './llm/index.js';
import { createLogger, type Logger } from './log/index.js';
import { setScrapeSources, startMetrics, type MetricsListener } from './metrics/index.js';
import { createPayments, type Payments } from './payments/index.js';
import { IdleTracker, TcpExposer } from './presence/index.js';
import { PublicUrls } from './pages/index.js';
import { createProxy, type Proxy } from './proxy/index.js';
import { ContainerRuntime, createRuntime, runCommand, Lxcfs, OomWatch, type ReconcileReport, type Runtime } from './runtime/index.js';
import { createSmsSender } from './sms/index.js';
import { SshServer, generateServerKeyPair } from './ssh/index.js';
import { openStore, type Store } from './store/index.js';
import { createVerifyApi } from './verify/index.js';

export interface Daemon<R extends Runtime = ContainerRuntime> {
  readonly edge: Edge;
  readonly store: Store;
  readonly tls: TlsManager;
  /** ACME certificates (the host's, servers' domains) and the HTTP-01 responder; `configured` false without https.acme. */
  readonly acme: Acme;
  readonly ssh: SshServer;
  readonly payments: Payments;
  readonly runtime: R;
  readonly presence: IdleTracker;
  readonly ports: TcpExposer;
  readonly proxy: Proxy;
  readonly billing: Billing;
  readonly hosting: HostingApi;
  readonly log: Logger;
  readonly admin: AdminListener;
  /** The Prometheus listener (port 0 when `metrics.listen` is off or could not bind). */
  readonly metrics: MetricsListener;
  stop(): Promise<void>;
}

/** Builds the runtime once the store is open. The daemon's own makes runc containers
 *  (createRuntime); tests that need no container give a runtime of plain processes. */
export type RuntimeMaker<R extends Runtime> = (cfg: Readonly<Config>, store: Store, log: Logger) => Promise<{ runtime: R; reconciled?: ReconcileReport }>;

const containers: RuntimeMaker<ContainerRuntime> = (cfg, store, log) => createRuntime(cfg, store.runtime, log);

export async function startDaemon<R extends Runtime = ContainerRuntime>(
  cfg: Readonly<Config>,
  log: Logger = createLogger({ level: cfg.log.level }),
  makeRuntime: RuntimeMaker<R> = containers as unknown as RuntimeMaker<R>,
): Promise<Daemon<R>> {
  const d = {} as { -readonly [K in keyof Daemon<R>]: Daemon<R>[K] };
  let statsTimer: NodeJS.Timeout | undefined;
  let lxcfs: Lxcfs | undefined;
  let oom: OomWatch | undefined;
  let unscrape = () => {};
  const parts: Part[] = [
    {
      name: 'store',
      start: () => {
        d.store = openStore(cfg.dataDir);
        statsTimer = setInterval(() => void d.store.stats.flush().catch((e) => log.error('stats flush failed', { err: e })), 2000);
        statsTimer.unref();
      },
      stop: async () => {
        clearInterval(statsTimer);
        await d.store.close();
      },
    },
    {
      name: 'payments',
      start: async () => {
        d.payments = createPayments(cfg.verify.x402, d.store.payments, log.child({ part: 'payments' }));
        await d.payments.start();
      },
      stop: () => d.payments.stop(),
    },
    {
      name: 'tls',
      start: () => {
        d.tls = new TlsManager({ domain: cfg.domain, dataDir: cfg.dataDir, cert: cfg.https.cert, key: cfg.https.key, log });
        if (d.tls.caFile)
          log.info('local CA for HTTPS clients', {
            ca: d.tls.caFile,
            hint: `curl --cacert ${d.tls.caFile} https://api.${cfg.domain}:${cfg.https.port}/healthz`,
          });
      },
      stop: () => d.tls.close(),
    },
    {
      name: 'acme', // stored certificates into the TLS listener; the host's own ordered/renewed in the background
      start: () => {
        d.acme = createAcme({
          domain: cfg.domain,
          dataDir: cfg.dataDir,
          settings: cfg.https.acme,
          store: d.store.certificates,
          sink: d.tls,
          run: runCommand,
          log,
        });
        d.acme.start();
      },
      stop: () => d.acme.stop(),
    },
    {
      name: 'lxcfs', // for runc containers only (not a runtime of plain processes)
      start: () => {
        if (makeRuntime === (containers as unknown)) lxcfs = new Lxcfs({ dataDir: cfg.dataDir, log: log.child({ part: 'lxcfs' }) });
        return lxcfs?.start();
      },
      stop: () => lxcfs?.stop(),
    },
    {
      name: 'runtime',
      start: async () => {
        const { runtime, reconciled } = await makeRuntime(cfg, d.store, log);
        d.runtime = runtime;
        if (reconciled) log.info('reconciled servers with runc', { ...reconciled });
      },
      stop: () => {},
    },
    {
      name: 'oom',
      start: () => {
        if (d.runtime instanceof ContainerRuntime) oom = new OomWatch({ servers: () => d.runtime.list(), log: log.child({ part: 'oom' }) });
        oom?.start();
      },
      stop: () => oom?.stop(),
    },
    {
      name: 'presence',
      start: () => {
        d.presence = new IdleTracker({
          runtime: d.runtime,
          neverSleep: (id) => d.store.servers.get(id)?.neverSleep ?? false,
          idleTimeout: cfg.proxy.idleTimeout,
          dozeTimeout: cfg.proxy.dozeTimeout,
          memoryFloor: cfg.proxy.dozeMemoryFloor,
          checkInterval: cfg.proxy.idleCheckInterval,
          log: log.child({ part: 'presence' }),
        });
        d.presence.start();
      },
      stop: () => d.presence.stop(),
    },
    {
      name: 'billing',
      start: () => {
        d.billing = new Billing({
          cfg: cfg.billing,
          store: d.store,
          runtime: d.runtime,
          usage: runtimeUsage(d.runtime, d.presence),
          settlements: d.payments.reconciler,
          log: log.child({ part: 'billing' }),
        });
      },
      stop: () => {},
    },
    {
      name: 'proxy',
      start: () => {
        d.proxy = createProxy({
          log: log.child({ part: 'proxy' }),
          cfg: cfg.proxy,
          servers: d.store.servers,
          runtime: d.runtime,
          presence: d.presence,
          egress: d.billing.egress,
          urls: new PublicUrls(cfg.public),
        });
        d.proxy.start();
      },
      stop: () => d.proxy.stop(),
    },
    {
      name: 'ports',
      start: () => {
        d.ports = new TcpExposer({
          host: '0.0.0.0',
          runtime: d.runtime,
          presence: d.presence,
          log: log.child({ part: 'expose' }),
          onEgress: d.billing.egress,
          suspended: (id) => d.store.servers.get(id)?.suspended === true,
        });
      },
      stop: () => d.ports.closeAll(),
    },
    {
      name: 'ssh',
      start: async () => {
        d.ssh = new SshServer({
          options: { ...cfg.ssh, dataDir: cfg.dataDir },
          servers: d.store.servers,
          runtime: d.runtime,
          presence: d.presence,
          log: log.child({ part: 'ssh' }),
        });
        await d.ssh.start();
      },
      stop: () => d.ssh.stop(),
    },
    {
      name: 'hosting',
      start: async () => {
        d.hosting = createHostingService({
          cfg,
          log: log.child({ part: 'hosting' }),
          store: d.store,
          runtime: d.runtime,
          presence: d.presence,
          sms: createSmsSender(cfg.hosting.sms, log.child({ part: 'sms' })),
          ports: d.ports,
          makeKeyPair: generateServerKeyPair,
          billing: d.billing,
          paywall: d.payments.paywall,
          sshPort: () => d.ssh.port || cfg.ssh.port,
          forget: (id) => d.proxy.forget(id),
          certs: domainCerts(d.acme),
        });
        await d.hosting.core.start();
      },
      stop: () => d.hosting.core.domains.stop(),
    },
    { name: 'metering', start: () => d.billing.start(), stop: () => d.billing.stop() },
    {
      name: 'edge',
      start: async () => {
        d.edge = new Edge({
          domain: cfg.domain,
          http: cfg.http,
          https: cfg.https,
          tls: d.tls,
          acmeChallenge: (path) => d.acme.http01.answer(path),
          log,
          aliases: d.hosting.core.domains.slugOf,
          apps: {
            hosting: d.hosting.router,
            verify: createVerifyApi({
              log,
              serviceName: cfg.verify.serviceName,
              paywall: d.payments.paywall,
              llm: createLlm(cfg.verify.llm),
              models: cfg.verify.llm.models,
              llmSettings: { temperature: cfg.verify.llm.temperature, maxTokens: cfg.verify.llm.maxTokens, passTimeoutMs: cfg.verify.llm.passTimeout },
              facilitatorUrl: cfg.verify.x402.facilitatorUrl,
              stats: d.store.stats,
              urls: new PublicUrls(cfg.public),
            }),
            proxy: d.proxy,
          },
        });
        await d.edge.start();
      },
      stop: () => d.edge.stop(cfg.shutdownTimeout),
    },
    {
      name: 'admin',
      start: async () => {
        d.admin = await startAdmin(cfg.dataDir, { ...d, cfg, log: log.child({ part: 'admin' }) });
      },
      stop: () => d.admin.close(),
    },
    {
      name: 'metrics', // auxiliary: a port it cannot bind is logged, never a reason not to serve
      start: async () => {
        unscrape = setScrapeSources({ servers: () => d.runtime.list(), dataDir: cfg.dataDir });
        d.metrics = await startMetrics(cfg.metrics.listen).catch((err: unknown) => {
          log.error('metrics listener could not start; serving without it', { listen: cfg.metrics.listen, err });
          return startMetrics('off');
        });
        if (d.metrics.port) log.info('metrics listening', { host: d.metrics.host, port: d.metrics.port });
      },
      stop: async () => {
        unscrape();
        await d.metrics.close();
      },
    },
  ];
  d.log = log;
  d.stop = await startAll(parts, log);
  return d;
}

/** Servers' own domains get their certificates through HTTP-01, stored and served by SNI under their name. */
function domainCerts(acme: Acme): CertIssuer {
  return {
    configured: acme.configured,
    issue: async (name) => void acme.certificates.save(name, await acme.issue([name], 'http-01')),
    remove: async (name) => void acme.certificates.remove(name),
    validity: (name) => {
      const rec = acme.certificates.load(name);
      return rec && { issuedAt: rec.issuedAt, notAfter: rec.notAfter };
    },
  };
}

/** Runs the daemon in the foreground until SIGTERM/SIGINT. */
export async function serve(cfg: Readonly<Config>): Promise<void> {
  const log = createLogger({ level: cfg.log.level });
  process.on('uncaughtException', (err) => log.error('uncaught exception; still serving', { err }));
  process.on('unhandledRejection', (err) => log.error('unhandled rejection; still serving', { err }));
  const daemon = await startDaemon(cfg, log);
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info('stopping', { signal, deadlineMs: cfg.shutdownTimeout });
    await daemon.stop();
    log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGHUP', () => daemon.tls.reload());
}
