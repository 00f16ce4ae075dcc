// Which checkpoint a returning host compares its copy of a moved server with (stalecopies.ts
// `unsaved`): the newest one this host took, never a newer one the new owner took and this host
// only adopted from the shared store (its record carries no written-at) — that one holds none of
// the copy's later writes, so comparing with it would delete writes that exist nowhere else.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { unsaved } from '../../src/hosting/stalecopies.js';
import type { Runtime } from '../../src/runtime/index.js';
import { openStore, type Store } from '../../src/store/index.js';

let dir = '';
let store: Store;
test.before(() => {
  dir = mkdtempSync(join(tmpdir(), 'rbx-stale-'));
  store = openStore(dir);
});
test.after(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const cp = (id: string, createdAt: number, writtenAt?: number) => ({
  id,
  serverId: 'srv_1',
  accountId: 'acc_1',
  createdAt,
  kind: 'auto' as const,
  sizeBytes: 1,
  newBytes: 1,
  ...(writtenAt === undefined ? {} : { writtenAt }),
});

test("a copy written after this host's own newest checkpoint is unsaved, though the new owner's later checkpoint was adopted here", async () => {
  const runtime = { filesChangedAt: () => 2_000 } as unknown as Runtime;
  await store.checkpoints.add(cp('cp_mine', 1_000, 1_000)); // taken here, before the copy's last writes
  await store.checkpoints.add(cp('cp_theirs', 5_000)); // the new owner's, adopted from the store at start
  assert.is(store.checkpoints.list('srv_1')[0].id, 'cp_theirs', 'the adopted one is the newest record');
  const u = await unsaved({ store, runtime }, 'srv_1');
  assert.is(u.unsaved, true, JSON.stringify(u));
  assert.is(u.checkpointAt, 1_000);
});

test.run();
