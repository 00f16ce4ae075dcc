// The daemon's presence parts (main.ts): the idle tracker (doze, sleep, wake once) and the
// exposed TCP ports, each built from the config and the parts started before it.

import type { Config } from '../config/index.js';
import type { Logger } from '../log/index.js';
import { IdleTracker, type IdleOptions } from './idle.js';
import { TcpExposer, type TcpExposerDeps } from './tcp.js';

/** The store's server records, as far as presence reads them. */
interface Servers {
  servers: { get(id: string): { neverSleep?: boolean; suspended?: boolean } | undefined };
}

export function startPresence(d: {
  cfg: Readonly<Pick<Config, 'proxy'>>;
  store: Servers;
  runtime: IdleOptions['runtime'];
  log: Logger;
  /** Cluster mode: the registry's fence, asked before every thaw (no dozing server thaws while this host fences itself). */
  registry?: { fence: { checkThaw(id: string): void } };
}): IdleTracker {
  const p = d.cfg.proxy;
  const fence = d.registry?.fence;
  const presence = new IdleTracker({
    mayThaw: fence && ((id) => fence.checkThaw(id)),
    runtime: d.runtime,
    neverSleep: (id) => d.store.servers.get(id)?.neverSleep ?? false,
    idleTimeout: p.idleTimeout,
    dozeTimeout: p.dozeTimeout,
    memoryFloor: p.dozeMemoryFloor,
    checkInterval: p.idleCheckInterval,
    log: d.log.child({ part: 'presence' }),
  });
  presence.start();
  return presence;
}

export function createPorts(d: {
  store: Servers;
  runtime: TcpExposerDeps['runtime'];
  presence: TcpExposerDeps['presence'];
  billing: { egress: NonNullable<TcpExposerDeps['onEgress']> };
  log: Logger;
}): TcpExposer {
  return new TcpExposer({
    host: '0.0.0.0',
    runtime: d.runtime,
    presence: d.presence,
    log: d.log.child({ part: 'expose' }),
    onEgress: d.billing.egress,
    suspended: (id) => d.store.servers.get(id)?.suspended === true,
  });
}
