// Benchmark of a metering pass, single box beside cluster mode in the same run: N servers of M
// accounts charged one period each, (a) in LMDB (charge, grant split and balance in one
// transaction per server) and (b) in registry mode (each period into the LMDB outbox with the
// cursor, then the outbox written to a real PostgreSQL in batches and the balances read back),
// passes alternating between the two. Prints p50/p90 of a pass and the ratio.
// Run: node --import tsx bench/billing/meter.bench.ts [servers=200] [accounts=20] [passes=30]

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Billing } from '../../src/billing/index.js';
import { silentLogger } from '../../src/log/index.js';
import { migrate, RegistryLedger, RegistryPool } from '../../src/registry/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { startPostgres } from '../../test/helpers/postgres.js';

const [servers = 200, accounts = 20, passes = 30] = process.argv.slice(2).map(Number);
const GB = 1024 ** 3;
const HOUR = 3_600_000;
const T0 = 1_700_000_000_000;
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const cfg = {
  ramUsdPerGbHour: 0.005,
  diskUsdPerGbMonth: 0.25,
  egressUsdPerGb: 0.05,
  grantRamGbHours: 10,
  grantEgressGb: 1,
  verifiedGrantRamGbHours: 100,
  verifiedGrantEgressGb: 10,
  meterInterval: 60_000,
  suspendAfter: 480 * HOUR,
  maxRechargeUsd: 100,
};

function fill(store: Store): void {
  for (let a = 0; a < accounts; a++)
    store.accounts.insert({
      id: `acc_${a}`,
      keyHash: String(a).padEnd(64, '0'),
      keyEnc: '',
      phone: null,
      createdIp: '192.0.2.1',
      createdAt: 0,
      balanceUsd: 1e6,
    });
  for (let s = 0; s < servers; s++)
    store.servers.insert({
      id: `srv_${s}`,
      accountId: `acc_${s % accounts}`,
      slug: `srv-${s}`,
      sshPublicKey: '',
      keyFingerprint: `srv_${s}`,
      memoryBytes: GB,
      diskBytes: GB,
      neverSleep: false,
      suspended: false,
      flag: null,
      createdAt: 0,
    });
}

const pg = await startPostgres();
const dirs: string[] = [];
const pool = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 5000 });
try {
  await migrate(pool);
  const make = (ledger?: RegistryLedger) => {
    const dir = mkdtempSync(join(tmpdir(), 'rbx-meter-bench-'));
    dirs.push(dir);
    const store = openStore(dir);
    fill(store);
    const billing = new Billing({
      cfg,
      store,
      log: silentLogger,
      runtime: { stop: async () => undefined, start: async () => undefined },
      usage: async () => ({ awake: true, memoryBytes: GB / 2, diskUsedBytes: GB, egressBytes: 0 }),
      ledger,
    });
    return { store, billing };
  };
  const lmdb = make();
  const reg = make(new RegistryLedger(pool, 'bench'));
  await lmdb.billing.tick(T0);
  await reg.billing.tick(T0);
  const tl: number[] = [];
  const tr: number[] = [];
  for (let i = 1; i <= passes; i++) {
    for (const [b, out] of i % 2
      ? ([
          [lmdb, tl],
          [reg, tr],
        ] as const)
      : ([
          [reg, tr],
          [lmdb, tl],
        ] as const)) {
      const t = performance.now();
      await b.billing.tick(T0 + i * HOUR);
      out.push(performance.now() - t);
    }
  }
  const n = Number(await pg.sql('SELECT count(*) FROM ledger_entries'));
  if (n !== servers * passes || reg.store.billing.pending(1).length) throw new Error(`registry holds ${n} entries, expected ${servers * passes}`);
  console.log(`metering pass, ${servers} servers of ${accounts} accounts, ${passes} passes each, alternating:`);
  console.log(`   LMDB (single box):        p50 ${pct(tl, 50).toFixed(1)} ms  p90 ${pct(tl, 90).toFixed(1)} ms`);
  console.log(`   registry (outbox + PG):   p50 ${pct(tr, 50).toFixed(1)} ms  p90 ${pct(tr, 90).toFixed(1)} ms`);
  console.log(`   ratio registry/LMDB p50:  ${(pct(tr, 50) / pct(tl, 50)).toFixed(2)}`);
  await lmdb.store.close();
  await reg.store.close();
} finally {
  await pool.end();
  await pg.stop();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
}
