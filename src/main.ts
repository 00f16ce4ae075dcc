// Composition root: load config, open the store, build the apps and the edge, start the parts in
// order, and wire signals (SIGTERM/SIGINT: graceful stop; SIGHUP: reload TLS).

import type { Config } from './config/index.js';
import { Edge, TlsManager } from './edge/index.js';
import { createHostingApi } from './hosting/index.js';
import { startAll, type Part } from './lifecycle.js';
import { createLlm } from './llm/index.js';
import { createLogger, type Logger } from './log/index.js';
import { createPayments, type Payments } from './payments/index.js';
import { createProxy, type Proxy } from './proxy/index.js';
import { SshServer } from './ssh/index.js';
import { openStore, type Store } from './store/index.js';
import { createVerifyApi } from './verify/index.js';

export interface Daemon {
  readonly edge: Edge;
  readonly store: Store;
  readonly tls: TlsManager;
  readonly ssh: SshServer;
  readonly payments: Payments;
  readonly log: Logger;
  stop(): Promise<void>;
}

export async function startDaemon(cfg: Readonly<Config>, log: Logger = createLogger({ level: cfg.log.level })): Promise<Daemon> {
  let store!: Store;
  let tls!: TlsManager;
  let edge!: Edge;
  let ssh!: SshServer;
  let payments!: Payments;
  let proxy!: Proxy;
  let statsTimer: NodeJS.Timeout | undefined;
  const parts: Part[] = [
    {
      name: 'store',
      start: () => {
        store = openStore(cfg.dataDir);
        statsTimer = setInterval(() => void store.stats.flush().catch((e) => log.error('stats flush failed', { err: e })), 2000);
        statsTimer.unref();
      },
      stop: async () => {
        clearInterval(statsTimer);
        await store.close();
      },
    },
    {
      name: 'payments',
      start: () => {
        payments = createPayments(cfg.verify.x402, store.payments, log.child({ part: 'payments' }));
        payments.start();
      },
      stop: () => payments.stop(),
    },
    {
      name: 'tls',
      start: () => {
        tls = new TlsManager({ domain: cfg.domain, dataDir: cfg.dataDir, cert: cfg.https.cert, key: cfg.https.key, log });
        if (tls.caFile) log.info('local CA for HTTPS clients', { ca: tls.caFile, hint: `curl --cacert ${tls.caFile} https://api.${cfg.domain}:${cfg.https.port}/healthz` });
      },
      stop: () => tls.close(),
    },
    {
      name: 'proxy',
      start: () => {
        proxy = createProxy({ log: log.child({ part: 'proxy' }), cfg: cfg.proxy, servers: store.servers });
        proxy.start();
      },
      stop: () => proxy.stop(),
    },
    {
      name: 'edge',
      start: async () => {
        edge = new Edge({
          domain: cfg.domain,
          http: cfg.http,
          https: cfg.https,
          tls,
          log,
          apps: {
            hosting: createHostingApi({ log, store }),
            verify: createVerifyApi({
              log,
              serviceName: cfg.verify.serviceName,
              paywall: payments.paywall,
              llm: createLlm(cfg.verify.llm),
              models: cfg.verify.llm.models,
              llmSettings: { temperature: cfg.verify.llm.temperature, maxTokens: cfg.verify.llm.maxTokens, passTimeoutMs: cfg.verify.llm.passTimeout },
              facilitatorUrl: cfg.verify.x402.facilitatorUrl,
              stats: store.stats,
            }),
            proxy,
          },
        });
        await edge.start();
      },
      stop: () => edge.stop(cfg.shutdownTimeout),
    },
    {
      name: 'ssh',
      start: async () => {
        ssh = new SshServer({ options: { ...cfg.ssh, dataDir: cfg.dataDir }, servers: store.servers, log: log.child({ part: 'ssh' }) });
        await ssh.start();
      },
      stop: () => ssh.stop(),
    },
  ];
  const stopAll = await startAll(parts, log);
  return { edge, store, tls, ssh, payments, log, stop: stopAll };
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
