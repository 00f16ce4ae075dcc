// A key this host does not know yet, asked once its source's budget of registry reads is spent
// (issue 35 review, finding 3): it may be a key made on another host a moment ago, not yet in this
// host's memory of every key (the registry's change feed), so it is answered 429 with Retry-After,
// not 401 invalid_api_key; 401 stays for a key the registry did not know a moment ago. Real
// PostgreSQL and LMDB; the memory of keys is the host's (KnownKeys) before the change reached
// it; the budget's clock is moved by hand.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { RegistryAccountBook } from '../../src/hosting/directory.js';
import { statusOf } from '../../src/http/index.js';
import { MissBudget, SOURCE_BURST } from '../../src/misses.js';
import { RegistryAccounts, RegistryPool } from '../../src/registry/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { initRegistry } from '../helpers/cluster.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';

let pg: TestPostgres;
let pool: RegistryPool;
let store: Store;
let dir: string;

test.before(async () => {
  pg = await startPostgres();
  pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(pool);
  dir = mkdtempSync(join(tmpdir(), 'rbx-newkey-'));
  store = openStore(dir);
});
test.after(async () => {
  await store?.close();
  await pool?.end();
  await pg?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const hashOf = () => createHash('sha256').update(randomBytes(16)).digest('hex');
const outcome = (p: Promise<{ account?: { id: string }; revoked: boolean }>) =>
  p.then(
    (r) => (r.account ? `account ${r.account.id}` : r.revoked ? 'revoked' : 'unknown'),
    (e: unknown) => (isAppError(e) ? `${statusOf(e.kind)} ${e.code} retry ${e.retryAfter}` : String(e)),
  );

test("a key made on another host, asked once the source's budget is spent, is 429 with Retry-After; a read later finds it", async () => {
  // host-b's memory of keys: loaded, and without the key host-a makes below (its change not in yet)
  const b = new RegistryAccounts(pool, 'host-b', { loaded: true, accountKeys: { byHash: () => undefined } });
  let t = 0;
  const book = new RegistryAccountBook(b, store, new MissBudget(() => t));
  const from = '192.0.2.7';
  for (let i = 0; i < SOURCE_BURST; i++) assert.is(await outcome(book.byKeyHash(hashOf(), from)), 'unknown', 'a stranger within the budget: read, unknown');
  const stranger = hashOf();
  assert.is(await outcome(book.byKeyHash(stranger, from)), '429 rate_limited retry 1', 'beyond the budget no read, and no claim the key is wrong');

  const hash = hashOf();
  await new RegistryAccounts(pool, 'host-a').insert({ id: 'acc_new', keyHash: hash, keyEnc: 'x', phone: null, createdIp: '192.0.2.8', createdAt: 1 });
  assert.is(await outcome(book.byKeyHash(hash, from)), '429 rate_limited retry 1', 'the new key is "try again", not 401');

  t += 1000; // the budget has reads again
  assert.is(await outcome(book.byKeyHash(hash, from)), 'account acc_new');
  assert.is(await outcome(book.byKeyHash(stranger, from)), 'unknown', 'a stranger read: unknown (401)');
  assert.is(await outcome(book.byKeyHash(stranger, from)), 'unknown', 'and asked again at once: unknown from memory, unread (401)');
});

test.run();
