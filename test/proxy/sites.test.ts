// The store-backed slug lookup: it joins the hosting record with the runtime's, answers from
// memory for a second (flag changes show up after that), and forgets a deleted server at once.
// Over the real store (LMDB), whose version changes with every write to a server record, it
// answers from memory however long ago it read, until a record is written.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { storeSites } from '../../src/proxy/index.js';
import type { RuntimeServer } from '../../src/runtime/types.js';
import { openStore, type ServerRecord } from '../../src/store/index.js';

const rec = (over: Partial<ServerRecord> = {}): ServerRecord => ({
  id: 'srv_a',
  accountId: 'acc',
  slug: 'alpha',
  sshPublicKey: '',
  keyFingerprint: 'f',
  memoryBytes: 0,
  diskBytes: 0,
  neverSleep: false,
  suspended: false,
  flag: null,
  createdAt: 0,
  ...over,
});
const rt: RuntimeServer = { id: 'srv_a', slug: 'alpha', ip: '10.0.0.9', uidBase: 0, memoryBytes: 0, diskBytes: 0, rootfs: '/srv/a', state: 'running' };

function fixture() {
  const clock = { t: 1000 };
  const db = { record: rec() as ServerRecord | undefined, reads: 0 };
  const sites = storeSites(
    { bySlug: (s) => (db.reads++, s === db.record?.slug ? db.record : undefined), get: () => db.record },
    { get: (id) => (id === rt.id ? rt : undefined) },
    { ttlMs: 1000, now: () => clock.t },
  );
  return { clock, db, sites };
}

test('a slug resolves to the record joined with the runtime: container ip, port 80, rootfs, flags', () => {
  const { sites } = fixture();
  assert.equal(sites.lookup('alpha'), {
    id: 'srv_a',
    slug: 'alpha',
    rootfs: '/srv/a',
    upstream: { host: '10.0.0.9', port: 80 },
    neverSleep: false,
    suspended: false,
    suspendedByOperator: false,
  });
  assert.is(sites.lookup('nobody'), undefined);
});

test('repeated lookups within a second read the store once; a suspension shows after the second', () => {
  const { clock, db, sites } = fixture();
  const first = sites.lookup('alpha');
  for (let i = 0; i < 100; i++) sites.lookup('alpha');
  assert.is(db.reads, 1);
  db.record = rec({ suspended: true });
  clock.t += 500;
  assert.is(sites.lookup('alpha')?.suspended, false);
  clock.t += 600;
  const later = sites.lookup('alpha');
  assert.is(later?.suspended, true);
  assert.is(later, first, 'the same site object (and upstream) is kept while the server is the same');
});

test('a forgotten (deleted) server is not answered from memory', () => {
  const { db, sites } = fixture();
  assert.ok(sites.lookup('alpha'));
  db.record = undefined;
  sites.forget?.('srv_a');
  assert.is(sites.lookup('alpha'), undefined);
});

test('over the real store: an hour later still no read; a record written (suspended) or the server moved in the runtime shows at the next lookup', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-sites-'));
  const store = openStore(dir);
  try {
    assert.ok(store.servers.insert(rec()));
    const clock = { t: 1000 };
    let reads = 0;
    const where = { ...rt };
    const servers = store.servers;
    const sites = storeSites(
      { bySlug: (slug) => (reads++, servers.bySlug(slug)), get: (id) => servers.get(id), version: () => servers.version() },
      { get: (id) => (id === where.id ? where : undefined) },
      { ttlMs: 1000, now: () => clock.t },
    );
    const first = sites.lookup('alpha');
    clock.t += 3_600_000;
    assert.is(sites.lookup('alpha'), first);
    assert.is(reads, 1, 'no store read while no record was written');
    store.servers.update('srv_a', () => ({ suspended: true }));
    assert.is(sites.lookup('alpha')?.suspended, true, 'a write shows at once, not after a second');
    assert.is(reads, 2);
    assert.is(sites.lookup('alpha'), first, 'the same site object while the server is the same');
    assert.is(reads, 2);
    where.ip = '10.0.0.10'; // its runtime record changed (no store write)
    assert.is(sites.lookup('alpha')?.upstream.host, '10.0.0.10');
    assert.is(reads, 3);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
