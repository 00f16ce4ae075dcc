// The built images of an image dir and which servers use them: a server keeps the image it was
// created from (its record names the tag) however often the recipe changes, so `image list`
// shows every built image with its users and `image prune` removes only those no server of this
// data dir uses (the current recipe's image is always kept) and scratch dirs of dead builds.

import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { AppError } from '../errors.js';
import { imageTag, isBuilt, LEGACY_HASH, tagRoot, type ImageOptions } from './image.js';

/** The tag a server's lower layer comes from. Records from before images were recorded were all
 *  made from the first recipe; when that image is gone they get the current one. */
export function serverTag(recorded: string | undefined, o: Pick<ImageOptions, 'imageDir' | 'name'>): string {
  if (recorded) return recorded;
  const legacy = imageTag(o, LEGACY_HASH);
  return isBuilt(o.imageDir, legacy) ? legacy : imageTag(o);
}

/** The rootfs of a server's image; image_missing when it is not (or no longer) built. */
export function serverLower(recorded: string | undefined, o: Pick<ImageOptions, 'imageDir' | 'name'>): string {
  const tag = serverTag(recorded, o);
  if (!isBuilt(o.imageDir, tag)) {
    throw AppError.of('image_missing', `the base image this server was created from (${tag}) is not on this host`);
  }
  return tagRoot(o.imageDir, tag);
}

export interface ImageInfo {
  tag: string;
  current: boolean;
  builtAt?: string;
  packages?: number;
  /** Ids of the servers whose lower layer it is. */
  servers: string[];
}

/** Every built image of the dir, newest first, with the servers (of `records`) using it. */
export function listImages(o: Pick<ImageOptions, 'imageDir' | 'name'>, records: readonly { id: string; image?: string }[]): ImageInfo[] {
  const dir = resolve(o.imageDir);
  if (!existsSync(dir)) return [];
  const users = new Map<string, string[]>();
  for (const r of records) {
    const tag = serverTag(r.image, o);
    users.set(tag, [...(users.get(tag) ?? []), r.id]);
  }
  const out: ImageInfo[] = [];
  for (const tag of readdirSync(dir)) {
    if (tag.startsWith('.') || tag.includes('.build-') || !isBuilt(dir, tag)) continue;
    let meta: { builtAt?: string; packages?: unknown[] } = {};
    try {
      meta = JSON.parse(readFileSync(join(dir, tag, 'recipe.json'), 'utf8'));
    } catch {
      /* unreadable metadata: listed without it */
    }
    out.push({ tag, current: tag === imageTag(o), builtAt: meta.builtAt, packages: meta.packages?.length, servers: users.get(tag) ?? [] });
  }
  return out.sort((a, b) => (b.builtAt ?? '').localeCompare(a.builtAt ?? ''));
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** Removes the images no server uses (never the current one) and scratch dirs of builds whose
 *  process is gone. Returns the removed directory names. */
export function pruneImages(o: Pick<ImageOptions, 'imageDir' | 'name'>, records: readonly { id: string; image?: string }[]): string[] {
  const dir = resolve(o.imageDir);
  const removed: string[] = [];
  for (const img of listImages(o, records)) {
    if (img.current || img.servers.length) continue;
    rmSync(join(dir, img.tag), { recursive: true, force: true });
    removed.push(img.tag);
  }
  if (!existsSync(dir)) return removed;
  for (const name of readdirSync(dir)) {
    const m = /\.build-(\d+)$/.exec(name);
    if (!m || alive(Number(m[1])) || !statSync(join(dir, name)).isDirectory()) continue;
    rmSync(join(dir, name), { recursive: true, force: true });
    removed.push(name);
  }
  return removed;
}

/** `rootbox image list` as text. */
export function formatImages(list: ImageInfo[]): string {
  if (!list.length) return 'no images built (rootbox image build)\n';
  return (
    list
      .map(
        (i) =>
          `${i.tag}${i.current ? '  (current)' : ''}  built ${i.builtAt ?? '?'}  ${i.servers.length} server${i.servers.length === 1 ? '' : 's'}${i.servers.length ? `: ${i.servers.join(' ')}` : ''}`,
      )
      .join('\n') + '\n'
  );
}
