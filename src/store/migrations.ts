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
];
