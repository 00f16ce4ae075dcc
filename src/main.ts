// Composition root: load config, open the store, build the runtime, the apps and the edge,
// start the parts in order (rolling back on failure), and wire signals (SIGTERM/SIGINT:
// graceful stop; SIGHUP: reload TLS). Containers keep running when the daemon stops.

import { startAdmin, type AdminListener } from './admin/index.js';
import { Billing } from './billing/index.js';
import type { Config } from './config/index.js';
import { Edge, TlsManager } from './edge/index.js';
import { createHostingService, type HostingApi } from './hosting/index.js';
import { startAll, type Part } from './lifecycle.js';
import { createLlm } from './llm/index.js';
import { createLogger, type Logger } from './log/index.js';
import { createPayments, type Payments } from './payments/index.js';
import { createProxy, type Proxy } from './proxy/index.js';
import { TcpExposer } from './proxy/tcp.js';
import { createRuntime, type ContainerRuntime } from './runtime/index.js';
import { createSmsSender } from './sms/index.js';
import { SshServer, generateServerKeyPair } from './ssh/index.js';
import { openStore, type Store } from './store/index.js';
import { createVerifyApi } from './verify/index.js';

export interface Daemon {
  readonly edge: Edge;
  readonly store: Store;
  readonly tls: TlsManager;
  readonly ssh: SshServer;
  readonly payments: Payments;
  readonly runtime: ContainerRuntime;
  readonly proxy: Proxy;
  readonly billing: Billing;
  readonly hosting: HostingApi;
  readonly log: Logger;
  readonly admin: AdminListener;
  stop(): Promise<void>;
}

export async function startDaemon(cfg: Readonly<Config>, log: Logger = createLogger({ level: cfg.log.level })): Promise<Daemon> {
  const d = {} as { -readonly [K in keyof Daemon]: Daemon[K] } & { tcp: TcpExposer };
  let statsTimer: NodeJS.Timeout | undefined;
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
      start: () => {
        d.payments = createPayments(cfg.verify.x402, d.store.payments, log.child({ part: 'payments' }));
        d.payments.start();
      },
      stop: () => d.payments.stop(),
    },
    {
      name: 'tls',
      start: () => {
        d.tls = new TlsManager({ domain: cfg.domain, dataDir: cfg.dataDir, cert: cfg.https.cert, key: cfg.https.key, log });
        if (d.tls.caFile) log.info('local CA for HTTPS clients', { ca: d.tls.caFile, hint: `curl --cacert ${d.tls.caFile} https://api.${cfg.domain}:${cfg.https.port}/healthz` });
      },
      stop: () => d.tls.close(),
    },
    {
      name: 'runtime',
      start: async () => {
        const { runtime, reconciled } = await createRuntime(cfg, d.store.runtime, log);
        d.runtime = runtime;
        if (reconciled) log.info('reconciled servers with runc', { ...reconciled });
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
          // billing starts after the proxy; bytes sent before it exists are not billed
          egress: (id, n) => d.billing?.meter.addEgress(id, n),
        });
        d.proxy.start();
      },
      stop: () => d.proxy.stop(),
    },
    {
      name: 'billing',
      start: () => {
        d.billing = new Billing({
          cfg: cfg.billing,
          store: d.store,
          runtime: d.runtime,
          log: log.child({ part: 'billing' }),
          usage: async (id) => {
            if (!d.runtime.get(id)) return undefined;
            const s = await d.runtime.stats(id);
            return { awake: (d.proxy.state(id) ?? d.runtime.get(id)?.state) === 'running', memoryBytes: s.memoryBytes, diskUsedBytes: s.diskUsedBytes, egressBytes: s.egressBytes };
          },
          onTierChange: (a) => d.hosting.core.servers.applyTier(a),
          syncTiers: async () => d.hosting?.core.syncTiers(),
        });
        d.payments.reconciler.onSettled((rec) => void d.billing.onSettled(rec).catch((e) => log.error('crediting a settled recharge failed', { err: e })));
        d.billing.start();
      },
      stop: () => d.billing.stop(),
    },
    {
      name: 'hosting',
      start: async () => {
        d.tcp = new TcpExposer({ host: '0.0.0.0', runtime: d.runtime, presence: d.proxy.presence, log: log.child({ part: 'expose' }), onEgress: (id, n) => d.billing.meter.addEgress(id, n) });
        d.hosting = createHostingService({
          cfg,
          log: log.child({ part: 'hosting' }),
          store: d.store,
          runtime: d.runtime,
          presence: d.proxy.presence,
          sms: createSmsSender(cfg.hosting.sms, log.child({ part: 'sms' })),
          ports: d.tcp,
          makeKeyPair: generateServerKeyPair,
          billing: d.billing,
          paywall: d.payments.paywall,
          sshPort: () => d.ssh?.port || cfg.ssh.port,
          stateOf: (id) => d.proxy.state(id),
          forget: (id) => d.proxy.forget(id),
        });
        await d.hosting.core.exposures.restore((msg, f) => log.warn(msg, f));
        await d.hosting.core.syncTiers(); // stored tiers (e.g. credit added while stopped) apply at start
      },
      stop: () => d.tcp.closeAll(),
    },
    {
      name: 'edge',
      start: async () => {
        d.edge = new Edge({
          domain: cfg.domain,
          http: cfg.http,
          https: cfg.https,
          tls: d.tls,
          log,
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
            }),
            proxy: d.proxy,
          },
        });
        await d.edge.start();
      },
      stop: () => d.edge.stop(cfg.shutdownTimeout),
    },
    {
      name: 'ssh',
      start: async () => {
        d.ssh = new SshServer({
          options: { ...cfg.ssh, dataDir: cfg.dataDir },
          servers: d.store.servers,
          runtime: () => d.runtime,
          presence: () => d.proxy.presence,
          log: log.child({ part: 'ssh' }),
        });
        await d.ssh.start();
      },
      stop: () => d.ssh.stop(),
    },
    {
      name: 'admin',
      start: async () => {
        d.admin = await startAdmin(cfg.dataDir, { store: d.store, billing: d.billing, log: log.child({ part: 'admin' }) });
      },
      stop: () => d.admin.close(),
    },
  ];
  const stopAll = await startAll(parts, log);
  d.stop = stopAll;
  return d;
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
