// What a server was given (slug, memory and disk limits), kept where it acts on the host: the
// bundle's config.json (hostname, memory limit; written here, synced before it replaces the old
// one), the disk image's size and net.json (the bounds on its connections, which nftables loses
// at a reboot) — read back when a runtime starts anew — and the image rootfs
// that is the lower layer of its overlay. The runtime (runtime.ts) keeps the in-memory view (viewOf).

import { existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { RuntimeConfig } from '../config/index.js';
import { InternalError } from '../errors.js';
import type { RuntimeRecord } from '../store/index.js';
import { writeDurably } from './bundle.js';
import { devicesDir } from './devices.js';
import { diskPaths, syncInitFiles } from './disk.js';
import { serverLower } from './images.js';
import { ensureLxcfsDir } from './lxcfs.js';
import { nsPaths } from './network.js';
import { cgroupPath, ociSpec } from './spec.js';
import type { NetBounds, RuntimeServer, ServerSpec, ServerState } from './types.js';

/** What a server was given (ServerSpec without id), as applied on the host. */
export type Applied = Pick<ServerSpec, 'slug' | 'memoryBytes' | 'diskBytes'> & { net: NetBounds };

/** The runtime's in-memory view of a server in `state`, with what it was given. */
export function viewOf(rec: RuntimeRecord, state: ServerState, applied: Applied, serverDir: string): RuntimeServer {
  return {
    id: rec.id,
    slug: applied.slug,
    ip: rec.ip,
    uidBase: rec.uidBase,
    memoryBytes: applied.memoryBytes,
    diskBytes: applied.diskBytes,
    net: applied.net,
    rootfs: diskPaths(serverDir).rootfs,
    state,
  };
}

const netFile = (serverDir: string) => join(serverDir, 'net.json');

/** Keeps the bounds given to a server (synced before it replaces the old file). */
export function writeNet(serverDir: string, net: NetBounds): void {
  writeDurably(netFile(serverDir), JSON.stringify({ flows: net.flows, newFlowsPerSecond: net.newFlowsPerSecond }));
}

/** The bounds given to a server, or `fallback` when none were kept (a server made before them). */
function readNet(serverDir: string, fallback: NetBounds): NetBounds {
  try {
    if (!existsSync(netFile(serverDir))) return fallback;
    const n = JSON.parse(readFileSync(netFile(serverDir), 'utf8')) as Partial<NetBounds>;
    const ok = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v > 0;
    return ok(n.flows) && ok(n.newFlowsPerSecond) ? { flows: n.flows!, newFlowsPerSecond: n.newFlowsPerSecond! } : fallback;
  } catch {
    return fallback;
  }
}

/** Slug and limits as the server's bundle (hostname, memory limit), disk image (size) and net.json
 *  say (`fallback`: the bounds of a server that has none kept). */
export function readApplied(serverDir: string, id: string, fallback: NetBounds): Applied {
  const file = join(serverDir, 'bundle', 'config.json');
  let spec: { hostname?: unknown; linux?: { resources?: { memory?: { limit?: unknown } } } };
  try {
    spec = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new InternalError('a server bundle cannot be read', { server: id, file }, { cause: e });
  }
  const slug = spec.hostname;
  const memoryBytes = spec.linux?.resources?.memory?.limit;
  if (typeof slug !== 'string' || typeof memoryBytes !== 'number')
    throw new InternalError('a server bundle names no hostname or memory limit', { server: id, file });
  return { slug, memoryBytes, diskBytes: statSync(diskPaths(serverDir).img).size, net: readNet(serverDir, fallback) };
}

/** Writes the OCI bundle of a server with the given slug and memory limit, synced before it
 *  replaces the old one: it is where the applied limit is kept. */
export function writeBundle(
  deps: { dataDir: string; initDir: string; cfg: RuntimeConfig },
  serverDir: string,
  rec: RuntimeRecord,
  applied: Pick<Applied, 'slug' | 'memoryBytes'>,
): void {
  const bundle = join(serverDir, 'bundle');
  mkdirSync(bundle, { recursive: true, mode: 0o700 });
  const p = diskPaths(serverDir);
  syncInitFiles(deps.initDir, p); // the init bind comes from the server's own disk (disk.ts)
  const spec = ociSpec({
    id: rec.id,
    cgroup: cgroupPath(deps.cfg, rec.id),
    slug: applied.slug,
    rootfs: p.rootfs,
    uidBase: rec.uidBase,
    memoryBytes: applied.memoryBytes,
    initDir: p.init,
    limits: deps.cfg,
    devDir: devicesDir(deps.dataDir),
    lxcfsDir: ensureLxcfsDir(deps.dataDir),
    ns: nsPaths(serverDir),
  });
  writeDurably(join(bundle, 'config.json'), JSON.stringify(spec));
}

/** The rootfs of the image the server was created from (its overlay's lower layer), given the
 *  rootfs of the current recipe's image (`<imageDir>/<name>-<hash>/rootfs`). */
export function lowerOf(currentImage: string, rec: RuntimeRecord): string {
  const current = dirname(currentImage);
  return serverLower(rec.image, { imageDir: dirname(current), name: basename(current).replace(/-[0-9a-f]{12}$/, '') });
}
