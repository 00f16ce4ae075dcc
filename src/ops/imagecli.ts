// `rootbox image build|list|prune`: the image commands of the command line. They read the
// servers of the configured data dir from its store (LMDB allows a running daemon beside them)
// to know which images are in use.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { AppError } from '../errors.js';
import { openStore } from '../store/index.js';
import { buildImage, formatImages, imageOptions, imageTag, listImages, pruneImages, serverTag } from '../runtime/index.js';

type Records = { id: string; image?: string }[];

async function serverRecords(dataDir: string): Promise<Records> {
  if (!existsSync(join(dataDir, 'db'))) return [];
  const store = openStore(dataDir);
  try {
    return store.runtime.all().map((r) => ({ id: r.id, image: r.image }));
  } finally {
    await store.close();
  }
}

export async function imageCommand(cfg: Pick<Config, 'dataDir' | 'runtime'>, sub: string, force: boolean, out: (text: string) => void): Promise<number> {
  const o = imageOptions(cfg);
  switch (sub) {
    case 'build': {
      if (force) {
        const users = (await serverRecords(cfg.dataDir)).filter((r) => serverTag(r.image, o) === imageTag(o));
        if (users.length) {
          throw AppError.of(
            'image_in_use',
            `image ${imageTag(o)} is the lower layer of ${users.length} server(s) and cannot be rebuilt in place; change the recipe to build a new image beside it`,
          );
        }
      }
      await buildImage(o, (l) => out(l + '\n'), force);
      return 0;
    }
    case 'list':
      out(formatImages(listImages(o, await serverRecords(cfg.dataDir))));
      return 0;
    case 'prune': {
      const removed = pruneImages(o, await serverRecords(cfg.dataDir));
      out(removed.length ? removed.map((t) => `removed ${t}\n`).join('') : 'nothing to remove: every image is in use or current\n');
      return 0;
    }
  }
  return 2;
}
