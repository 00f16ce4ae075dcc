// The daemon's runtime-side parts (main.ts) that only runc containers have: lxcfs (the servers'
// /proc view, started before any boot), the OOM watch (kills told to the server's user) and the
// flow watch (connections dropped by a server's bounds: the metric and the server's rootbox.log).
// A runtime of plain processes (tests) gets neither.

import type { Config } from '../config/index.js';
import type { Logger } from '../log/index.js';
import { Lxcfs } from './lxcfs.js';
import { FlowWatch } from './flowwatch.js';
import { OomWatch } from './oom.js';
import { ContainerRuntime } from './runtime.js';
import type { Runtime } from './types.js';

export async function startLxcfs(d: { cfg: Readonly<Pick<Config, 'dataDir'>>; log: Logger }, containers: boolean): Promise<Lxcfs | undefined> {
  if (!containers) return undefined;
  const lxcfs = new Lxcfs({ dataDir: d.cfg.dataDir, log: d.log.child({ part: 'lxcfs' }) });
  await lxcfs.start();
  return lxcfs;
}

export function startOomWatch(d: { runtime: Runtime; log: Logger }): OomWatch | undefined {
  if (!(d.runtime instanceof ContainerRuntime)) return undefined;
  const runtime = d.runtime;
  const oom = new OomWatch({ servers: () => runtime.list(), cgroup: (id) => runtime.cgroup(id), log: d.log.child({ part: 'oom' }) });
  oom.start();
  return oom;
}

export function startFlowWatch(d: { cfg: Readonly<Pick<Config, 'runtime'>>; runtime: Runtime; log: Logger }): FlowWatch | undefined {
  if (!(d.runtime instanceof ContainerRuntime)) return undefined;
  const runtime = d.runtime;
  const flows = new FlowWatch({
    servers: () => runtime.list(),
    table: d.cfg.runtime.nftTable,
    logEvery: d.cfg.runtime.egress.logEvery,
    log: d.log.child({ part: 'flows' }),
  });
  flows.start();
  return flows;
}
