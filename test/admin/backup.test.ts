// `rootbox backup` and `rootbox restore` with the real CLI, the real daemon and LMDB: a backup taken
// while two writers are being acknowledged (feedback over HTTP, credits over the admin socket)
// holds every write acknowledged before it began, and each writer's writes as an unbroken
// prefix (one snapshot, not a torn copy); restored into a new data dir, a daemon started there
// serves them. Restore refuses while a daemon or any process holds the store, a backup of a newer
// schema, and a file that is not a store — and then leaves the data dir as it was.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { callAdmin } from '../../src/admin/index.js';
import { openEnv } from '../../src/store/db.js';
import { migrations } from '../../src/store/migrations.js';
import { openStore, SCHEMA_VERSION } from '../../src/store/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { call, ensureBuilt, rootboxBin } from '../billing/api.js';

let d: TestDaemon;
let restored: TestDaemon | undefined;
const dirs: string[] = [];
const scratch = () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-backup-'));
  dirs.push(dir);
  return dir;
};
const settings = { publicIp: '127.0.0.1', hosting: { rateLimit: { perIpPerMinute: 100_000, createsPerIpPerHour: 1000 } } };

test.before(async () => {
  ensureBuilt();
  d = await startTestDaemon(settings);
});
test.after(async () => {
  await restored?.stop();
  await d?.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const cli = (dataDir: string, ...args: string[]) => run(rootboxBin, args, { env: { ...process.env, ROOTBOX_DATA_DIR: dataDir }, timeoutMs: 120_000 });

/** POST /feedback from a loopback address of its own (feedback is limited to 5 per address). */
function feedback(from: string, message: string): Promise<number> {
  const data = JSON.stringify({ message });
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: d.http,
        localAddress: from,
        method: 'POST',
        path: '/feedback',
        headers: { host: 'api.localhost', 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

/** Acknowledged writes in order; the first index that is missing, and whether every later one is missing too. */
function prefix(acked: string[], present: Set<string>) {
  const firstMissing = acked.findIndex((x) => !present.has(x));
  return { held: firstMissing === -1 ? acked.length : firstMissing, unbroken: firstMissing === -1 || acked.slice(firstMissing).every((x) => !present.has(x)) };
}

test('a backup taken under load holds every write acknowledged before it began, as an unbroken prefix of each writer; a daemon on the restored store serves them', async () => {
  const c = await call(d.http, 'POST', '/create');
  assert.is(c.status, 200, JSON.stringify(c.body));
  const account = d.daemon.store.servers.get(c.body.id)!.accountId;
  // the new data dir gets the store, not server disks: keep the account, delete its server
  assert.is((await call(d.http, 'DELETE', `/servers/${c.body.id}`, { key: c.body.api_key })).status, 200);

  let stop = false;
  const credits: string[] = [];
  const notes: string[] = [];
  const creditLoop = (async () => {
    while (!stop) {
      const source = `admin:${randomUUID()}`;
      const a = await callAdmin(d.dataDir, 'POST', '/credit', { target: account, usd: '0.01', source });
      assert.is(a?.status, 200, JSON.stringify(a?.body));
      credits.push(source);
    }
  })();
  const feedbackLoop = (async () => {
    for (let i = 0; !stop && i < 5 * 250; i++) {
      const message = `load ${i} ${randomUUID()}`;
      assert.is(await feedback(`127.0.0.${2 + Math.floor(i / 5)}`, message), 200);
      notes.push(message);
    }
  })();
  while (credits.length < 20 || notes.length < 20) await sleep(20);
  const before = { credits: credits.length, notes: notes.length };
  const file = join(scratch(), 'rootbox-store.mdb');
  const b = await cli(d.dataDir, 'backup', file, '--json');
  const after = { credits: credits.length, notes: notes.length };
  await sleep(200);
  stop = true;
  await Promise.all([creditLoop, feedbackLoop]);
  assert.is(b.code, 0, b.stderr);
  const made = JSON.parse(b.stdout);
  assert.is(made.file, file);
  assert.is(made.schema_version, SCHEMA_VERSION);
  assert.is(statSync(file).mode & 0o777, 0o600, 'the backup is root only');
  assert.ok(
    after.credits + after.notes > before.credits + before.notes,
    `the daemon kept acknowledging writes while the backup ran: ${JSON.stringify({ before, after })}`,
  );

  const fresh = scratch();
  const r = await cli(fresh, 'restore', file, '--json');
  assert.is(r.code, 0, r.stderr);
  assert.is(JSON.parse(r.stdout).kept_as, null, 'nothing was there before');
  restored = await startTestDaemon({ ...settings, dataDir: fresh });
  const store = restored.daemon.store;

  const ledger = store.billing.entries(account, 100_000).items.filter((e) => e.kind === 'credit');
  const credited = prefix(credits, new Set(ledger.map((e) => e.source!)));
  assert.ok(credited.held >= before.credits, `credits acknowledged before the backup: ${before.credits}, in it: ${credited.held}`);
  assert.ok(credited.unbroken, 'credits form an unbroken prefix');
  assert.is(ledger.length, credited.held + 0, 'no credit the writer did not make');
  const balance = Math.round(store.accounts.get(account)!.balanceUsd * 100);
  assert.is(balance, credited.held, 'the balance agrees with the ledger of the same snapshot');

  console.log(
    `  backup under load: ${made.ms} ms, ${made.bytes} bytes; credits acknowledged ${before.credits} before / ${after.credits} after the CLI ran, ${credited.held} in the backup; feedback ${before.notes} / ${after.notes}, in it:`,
    prefix(notes, new Set(store.feedback.list(100_000).map((f) => f.message))).held,
  );
  const stored = prefix(notes, new Set(store.feedback.list(100_000).map((f) => f.message)));
  assert.ok(stored.held >= before.notes, `feedback acknowledged before the backup: ${before.notes}, in it: ${stored.held}`);
  assert.ok(stored.unbroken, 'feedback forms an unbroken prefix');

  const served = await call(restored.http, 'GET', '/credits', { key: c.body.api_key });
  assert.is(served.status, 200, JSON.stringify(served.body));
  assert.is(Math.round(served.body.balance_usd * 100), credited.held, 'the restored daemon authenticates the old api_key and answers its balance');
});

test('restore refuses while a daemon answers on the admin socket or another process has the store open, and changes nothing', async () => {
  const file = join(scratch(), 'b.mdb');
  assert.is((await cli(d.dataDir, 'backup', file)).code, 0);
  const busy = await cli(d.dataDir, 'restore', file);
  assert.is(busy.code, 1);
  assert.match(busy.stderr, /a daemon answers on .*admin\.sock; stop it first/);
  assert.not.ok(
    readdirSync(d.dataDir).some((n) => n.startsWith('db.')),
    'no db.before-restore-* and no staging left',
  );

  const other = scratch();
  const held = openStore(other); // this test process holds the store, as a daemon without its socket would
  try {
    const r = await cli(other, 'restore', file);
    assert.is(r.code, 1);
    assert.match(r.stderr, new RegExp(`process ${process.pid} has the store of ${other} open`));
  } finally {
    await held.close();
  }
  const ok = await cli(other, 'restore', file, '--json');
  assert.is(ok.code, 0, ok.stderr);
  const kept = JSON.parse(ok.stdout).kept_as;
  assert.match(kept, new RegExp(`^${other}/db\\.before-restore-\\d{4}-\\d\\d-\\d\\dT`));
  assert.ok(existsSync(join(kept, 'data.mdb')), 'the old store is kept beside the new one');
});

test('restore refuses a backup of a newer schema, a file that is not a store and a store cut short, leaving the data dir untouched; backup refuses a data dir without a store', async () => {
  const future = scratch();
  const env = openEnv(future, [...migrations, { version: SCHEMA_VERSION + 98, description: 'from a later rootbox', up() {} }]);
  await env.close();
  const file = join(scratch(), 'future.mdb');
  const b = await cli(future, 'backup', file, '--json');
  assert.is(b.code, 0, b.stderr);
  assert.is(JSON.parse(b.stdout).schema_version, SCHEMA_VERSION + 98);

  const target = scratch();
  const r = await cli(target, 'restore', file);
  assert.is(r.code, 1);
  assert.match(r.stderr, new RegExp(`has schema version ${SCHEMA_VERSION + 98}, newer than this rootbox understands \\(${SCHEMA_VERSION}\\)`));
  assert.equal(readdirSync(target), []);

  const junk = join(scratch(), 'notes.txt');
  writeFileSync(junk, 'not a database\n'.repeat(1000));
  const j = await cli(target, 'restore', junk);
  assert.is(j.code, 1);
  assert.match(j.stderr, /is not an LMDB database/);
  assert.equal(readdirSync(target), []);

  const cut = join(scratch(), 'cut.mdb');
  writeFileSync(cut, readFileSync(file).subarray(0, statSync(file).size - 4096)); // a copy that stopped one page short
  const c = await cli(target, 'restore', cut);
  assert.is(c.code, 1, 'refused, not a crash of LMDB on a short file');
  assert.match(c.stderr, /is cut short/);
  assert.equal(readdirSync(target), []);

  const none = await cli(target, 'backup', join(target, 'x.mdb'));
  assert.is(none.code, 1);
  assert.match(none.stderr, /there is no store at/);
});

test.run();
