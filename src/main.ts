// Composition root: load config, open the store, build the apps and the edge, start the parts in
// order, and wire signals (SIGTERM/SIGINT: graceful stop; SIGHUP: reload TLS).

import type { Config } from './config/index.js';
import { Edge, TlsManager } from './edge/index.js';
import { createHostingApi } from './hosting/index.js';
import { startAll, type Part } from './lifecycle.js';
import { createLogger, type Logger } from './log/index.js';
import { createProxy } from './proxy/index.js';
import { openStore, type Store } from './store/index.js';
import { createVerifyApi } from './verify/index.js';

export interface Daemon {
  readonly edge: Edge;
  readonly store: Store;
  readonly tls: TlsManager;
  readonly log: Logger;
  stop(): Promise<void>;
}

export async function startDaemon(cfg: Readonly<Config>, log: Logger = createLogger({ level: cfg.log.level })): Promise<Daemon> {
  let store!: Store;
  let tls!: TlsManager;
  let edge!: Edge;
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
      name: 'tls',
      start: () => {
        tls = new TlsManager({ domain: cfg.domain, dataDir: cfg.dataDir, cert: cfg.https.cert, key: cfg.https.key, log });
        if (tls.caFile) log.info('local CA for HTTPS clients', { ca: tls.caFile, hint: `curl --cacert ${tls.caFile} https://api.${cfg.domain}:${cfg.https.port}/healthz` });
      },
      stop: () => tls.close(),
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
            verify: createVerifyApi({ log, serviceName: cfg.verify.serviceName }),
            proxy: createProxy({ log }),
          },
        });
        await edge.start();
      },
      stop: () => edge.stop(cfg.shutdownTimeout),
    },
  ];
  const stopAll = await startAll(parts, log);
  return { edge, store, tls, log, stop: stopAll };
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
