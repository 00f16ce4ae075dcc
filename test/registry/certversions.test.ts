// Certificate versions commit in the order they are taken (F3): a host's poll asks for versions
// above the highest it saw, so a save numbered first but committed after a later one would be
// skipped until a restart. Two saves, the first held open in its transaction (two PostgreSQL
// clients), and a pulling host (the real ACME service's `pull`, a real LMDB store) between them:
// it ends with both. Real PostgreSQL; no CA needed (the rows are written by the registry's own
// writer, as an ordering host's would be).
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createAcme } from '../../src/acme/index.js';
import { loadConfig } from '../../src/config/index.js';
import { createLogger } from '../../src/log/index.js';
import { RegistryPool, RegistryShared } from '../../src/registry/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { initRegistry, testKeys } from '../helpers/cluster.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { until } from '../helpers/wait.js';

let pg: TestPostgres;
let store: Store | undefined;
const pools: RegistryPool[] = [];
const dir = mkdtempSync(join(tmpdir(), 'rbx-certv-'));
const pool = () => {
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 10_000 });
  pools.push(p);
  return p;
};

test.before(async () => {
  pg = await startPostgres();
  await initRegistry(pool());
});
test.after(async () => {
  for (const p of pools) await p.end();
  await pg?.stop();
  await store?.close();
  rmSync(dir, { recursive: true, force: true });
});

const cert = (id: string) => ({
  id,
  names: [`${id}.example.org`],
  certPem: `CERT ${id}`,
  keyPem: `KEY ${id}`,
  notAfter: Date.now() + 86_400_000,
  issuedAt: Date.now(),
});

test('a certificate numbered first but committed after a later one still reaches a pulling host', async () => {
  const a = new RegistryShared(pool(), 'host-a', testKeys());
  const b = new RegistryShared(pool(), 'host-b', testKeys());
  const reader = new RegistryShared(pool(), 'host-c', testKeys());
  store = openStore(dir);
  const installed = new Map<string, string>();
  const cfg = loadConfig({ env: {}, file: undefined, overrides: { dataDir: dir } });
  const acme = createAcme({
    domain: 'example.org',
    dataDir: dir,
    settings: cfg.https.acme,
    store: store.certificates,
    sink: { install: (id, _names, certPem) => installed.set(id, certPem), uninstall: (id) => installed.delete(id) },
    run: async () => undefined, // no DNS hook: nothing is ordered
    log: createLogger({ level: 'error', sink: () => {} }),
    shared: reader,
  });

  // A's save is numbered and held open in its transaction
  let commit!: () => void;
  const held = new Promise<void>((r) => (commit = r));
  let numbered!: () => void;
  const inside = new Promise<void>((r) => (numbered = r));
  const first = pool().tx(async (c) => {
    await a.saveCertificate(cert('first'), c);
    numbered();
    await held;
  });
  await inside;
  // B saves another meanwhile: numbered after A's (it commits, or waits for A's commit)
  let secondDone = false;
  const second = b.saveCertificate(cert('second')).then(() => (secondDone = true));
  await until('B saved, or waits for the feed lock', async () => secondDone || Number(await pg.sql('SELECT count(*) FROM pg_locks WHERE NOT granted')) > 0);
  await acme.pull(); // a host polls in between
  commit();
  await first;
  await second;
  await acme.pull();
  assert.equal([...installed.keys()].sort(), ['first', 'second'], 'the pulling host installed both');
  assert.is(installed.get('first'), 'CERT first');
  const versions = (await reader.certificatesSince(0)).map((c) => [c.id, c.version]);
  assert.equal(
    versions.map(([id]) => id),
    ['first', 'second'],
    `numbered in commit order: ${JSON.stringify(versions)}`,
  );

  // a removal is numbered under the same lock: held behind an open save, it is not skipped either
  let commit2!: () => void;
  const held2 = new Promise<void>((r) => (commit2 = r));
  let numbered2!: () => void;
  const inside2 = new Promise<void>((r) => (numbered2 = r));
  const third = pool().tx(async (c) => {
    await a.saveCertificate(cert('third'), c);
    numbered2();
    await held2;
  });
  await inside2;
  let removed = false;
  const removal = b.removeCertificate('second').then(() => (removed = true));
  await until('B removed, or waits for the feed lock', async () => removed || Number(await pg.sql('SELECT count(*) FROM pg_locks WHERE NOT granted')) > 0);
  await acme.pull();
  commit2();
  await third;
  await removal;
  await acme.pull();
  assert.equal([...installed.keys()].sort(), ['first', 'third'], 'the third installed, the second removed');
});

test.run();
