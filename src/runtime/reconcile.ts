// Start-up reconciliation of the store (desired state) with runc and the host (actual state):
//   - host commands a killed daemon left running on this data dir are ended first (leftovers.ts),
//     so none of them recreates something after it was cleaned up;
//   - a pending record (a create never committed, a delete under way) is torn down with all it
//     holds: container, cgroup, veth, nft element and counter, mounts, loop device, files, and
//     its address and uid range go back to the pool;
//   - a container runc knows but the store does not (an orphan of a crashed create or delete) is
//     killed and deleted, and a server directory without a record is unmounted and removed;
//   - a running container of a known server is adopted as it is (the cgroups of the execs a daemon
//     before this one ran in it are released: execgroup.ts); a frozen one (runc: paused),
//     dozing when the daemon stopped, stays frozen: the idle tracker adopts it as dozing
//     (Runtime.frozen), so it is shown and billed asleep and the next request thaws it; one in
//     another cgroup parent than this daemon's (spec.ts cgroupPath: made by a release before the
//     parent was per daemon, on a daemon with another nft table) is restarted into its own;
//   - a `created` container of a sleeping server (parked, runtime.ts park()) is adopted as parked
//     when its bundle is unchanged, else deleted and the server parked again; one of a server that
//     should run is started (its parked start);
//   - a known server whose container is gone or stopped (host reboot, crash) gets its disk and
//     overlay mounted again, its counter and connection bounds re-added, and is started when it should be running
//     and the start guard lets it (cluster mode's wake fence: not one the registry moved to
//     another host or deleted while this host was down: `fenced`);
//     otherwise it stays asleep with its rootfs mounted (the proxy serves /root/www from it);
//   - nft elements, counters and veths of addresses no record holds are removed.

import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { destroyDisk, diskPaths } from './disk.js';
import { mountRootfs } from './disk.js';
import { thawLeftovers } from './diskcopy.js';
import { endLeftovers } from './leftovers.js';
import type { ContainerRuntime } from './runtime.js';
import { cgroupDirs, removeCgroup } from './cgroup.js';
import { settle } from './freezer.js';
import { ExecGroup } from './execgroup.js';

export interface ReconcileReport {
  adopted: string[];
  started: string[];
  sleeping: string[];
  orphans: string[];
  /** Pending records (uncommitted creates, unfinished deletes) torn down. */
  removed: string[];
  /** Servers that should run but the start guard refused (left asleep). */
  fenced: string[];
  failed: string[];
}

export async function reconcile(rt: ContainerRuntime): Promise<ReconcileReport> {
  const { store, log, helper, dataDir } = rt.deps;
  const report: ReconcileReport = { adopted: [], started: [], sleeping: [], orphans: [], removed: [], fenced: [], failed: [] };
  // a checkpoint cut short by the crash left its disk frozen: thawed before anything touches a disk
  for (const rec of store.all()) await thawLeftovers(diskPaths(rt.serverDir(rec.id)));
  const ended = await endLeftovers(dataDir, dirname(helper));
  if (ended.length) log.warn('reconcile: ended commands a previous daemon left running', { commands: ended });
  for (const rec of store.all().filter((r) => r.pending !== undefined)) {
    try {
      await rt.serial(rec.id, () => rt.teardown(rec));
      report.removed.push(rec.id);
    } catch (err) {
      report.failed.push(rec.id);
      log.error('reconcile: an unfinished create or delete could not be removed', { server: rec.id, err });
    }
  }
  const records = new Map(store.all().map((r) => [r.id, r]));
  const containers = await rt.runc.list();
  for (const c of containers) {
    if (records.has(c.id)) continue;
    report.orphans.push(c.id);
    await rt.runc.kill(c.id, 'KILL', c.status !== 'created'); // a created one: its init alone (halt.ts says why)
    await rt.runc.delete(c.id, true).catch((err) => log.warn('orphan delete failed', { container: c.id, err }));
    removeCgroup(rt.cgroup(c.id));
  }
  const dir = rt.serverDir('');
  if (existsSync(dir)) {
    for (const name of readdirSync(dir)) {
      if (records.has(name)) continue;
      if (!report.orphans.includes(name)) report.orphans.push(name); // its container was listed above
      await destroyDisk(diskPaths(rt.serverDir(name))).catch((err) => log.warn('orphan disk cleanup failed', { server: name, err }));
      removeCgroup(rt.cgroup(name));
    }
  }
  const status = new Map(containers.map((c) => [c.id, c.status]));
  for (const rec of records.values()) {
    if (rec.pending !== undefined) continue; // its teardown failed above; the next start retries
    try {
      await rt.serial(rec.id, async () => {
        await mountRootfs(diskPaths(rt.serverDir(rec.id)), helper, rt.lower(rec), rec.uidBase);
        const applied = rt.applied(rec.id); // slug and limits as its bundle, disk and net.json hold them
        await rt.net.addServer(rec.ip, applied.net);
        const bundleFile = join(rt.serverDir(rec.id), 'bundle', 'config.json');
        const before = readFileSync(bundleFile, 'utf8');
        rt.writeBundle(rec, applied);
        const sameBundle = readFileSync(bundleFile, 'utf8') === before;
        if ((status.get(rec.id) === 'running' || status.get(rec.id) === 'paused') && !cgroupDirs(rt.cgroup(rec.id)).length) {
          // made under another cgroup parent (before the parent was this daemon's own, spec.ts
          // cgroupPath): stopped, then started below in its own, where its freeze, its stop's
          // cgroup kill and the watchdog (fencewatch.ts) reach it
          await rt.halt(rec, rt.deps.cfg.stopGrace);
          status.delete(rec.id);
          log.warn("reconcile: a server running in another cgroup parent was restarted into this daemon's", { server: rec.id });
        }
        if (status.get(rec.id) === 'running' || status.get(rec.id) === 'paused') {
          settle(rt.cgroup(rec.id)); // a freeze cut short by the crash: running, not half frozen
          // what the execs of the daemon before ran goes on in the server, no longer tracked
          for (const g of ExecGroup.existing(rt.cgroup(rec.id))) await g.release();
          rt.view(rec, 'running', applied);
          report.adopted.push(rec.id);
        } else if (rec.desired === 'running' && (await mayStart(rt, rec.id, report))) {
          if (status.get(rec.id) === 'created' && !sameBundle) await rt.halt(rec, 0); // parked from another bundle
          rt.view(rec, 'waking', applied);
          await rt.boot(rec);
          rt.view(rec, 'running');
          report.started.push(rec.id);
        } else if (status.get(rec.id) === 'created' && sameBundle && rt.deps.cfg.parkOnSleep === 'on' && rt.runc.createdInit(rec.id)) {
          rt.view(rec, 'sleeping', applied);
          rt.adoptParked(rec.id);
          report.sleeping.push(rec.id);
        } else {
          const parked = status.get(rec.id) === 'created';
          if (status.has(rec.id)) await rt.halt(rec, 0);
          else removeCgroup(rt.cgroup(rec.id)); // a park or wake killed inside runc create leaves empty cgroups
          rt.view(rec, 'sleeping', applied);
          if (parked) await rt.park(rec); // made with another bundle (an upgrade, a resize cut short)
          report.sleeping.push(rec.id);
        }
      });
    } catch (err) {
      try {
        rt.view(rec, 'failed');
      } catch {
        // no readable bundle: no view either (the runtime answers it as unknown)
      }
      report.failed.push(rec.id);
      log.error('reconcile: server could not be restored', { server: rec.id, err });
    }
  }
  const pruned = await rt.net.prune(new Set(store.all().map((r) => r.ip)));
  if (pruned.length) log.warn('reconcile: removed network leftovers', { items: pruned });
  log.info('runtime reconciled', {
    adopted: report.adopted.length,
    started: report.started.length,
    sleeping: report.sleeping.length,
    orphans: report.orphans.length,
    removed: report.removed.length,
    fenced: report.fenced.length,
    failed: report.failed.length,
  });
  return report;
}

/** Whether the start guard lets a server that should run start now; a refusal is logged and the
 *  server counted as fenced (it is then left asleep like any other). */
async function mayStart(rt: ContainerRuntime, id: string, report: ReconcileReport): Promise<boolean> {
  try {
    await rt.deps.mayStart?.(id);
    return true;
  } catch (err) {
    report.fenced.push(id);
    rt.deps.log.warn('reconcile: a server that should run is left asleep: its start was refused', { server: id, err });
    return false;
  }
}
