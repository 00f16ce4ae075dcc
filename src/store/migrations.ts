// Schema migrations, oldest first. A migration runs once, inside one write transaction with
// the version bump; add new ones at the end and never edit a released one.

import type { Migration } from './db.js';

export const migrations: readonly Migration[] = [
  {
    version: 1,
    description: 'initial layout: meta, feedback, stats',
    up() {
      // Named databases are created on first open; nothing to move yet.
    },
  },
  {
    version: 2,
    description: 'runtime records keep only what the runtime owns: slug, memoryBytes and diskBytes leave rt_servers',
    up(env) {
      // The server record (servers) holds slug and limits; the runtime keeps the limits it
      // applied in each server's OCI bundle and disk image. Dropping the copies leaves no second
      // value that could disagree with the first.
      const rt = env.db<Record<string, unknown>>('rt_servers');
      for (const { key, value } of [...rt.getRange()]) {
        if (!('slug' in value || 'memoryBytes' in value || 'diskBytes' in value)) continue;
        const { slug: _s, memoryBytes: _m, diskBytes: _d, ...kept } = value;
        rt.putSync(key, kept);
      }
    },
  },
];
