// An operator's suspension (`rootbox servers suspend`: suspended + flag suspended_by_operator)
// against billing's own suspension, with the real store and a controlled clock: when credit ends
// billing's suspension, the servers billing suspended start again and the operator's stays
// suspended and stopped.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Billing, OPERATOR_SUSPENDED } from '../../src/billing/index.js';
import { silentLogger } from '../../src/log/index.js';
import { openStore } from '../../src/store/index.js';

const GB = 1024 ** 3;
const HOUR = 3_600_000;

test('credit after billing suspended an account starts its servers again but not the one an operator suspended', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-susp-'));
  const store = openStore(dir);
  try {
    const calls: string[] = [];
    const billing = new Billing({
      cfg: {
        ramUsdPerGbHour: 0.005,
        diskUsdPerGbMonth: 0.25,
        egressUsdPerGb: 0.05,
        grantRamGbHours: 10,
        grantEgressGb: 1,
        verifiedGrantRamGbHours: 100,
        verifiedGrantEgressGb: 10,
        meterInterval: 60_000,
        suspendAfter: 48 * HOUR,
        maxRechargeUsd: 100,
      },
      store,
      log: silentLogger,
      runtime: { stop: async (id) => void calls.push(`stop ${id}`), start: async (id) => void calls.push(`start ${id}`) },
      usage: async (id) =>
        id === 'srv_run'
          ? { awake: true, memoryBytes: 2 * GB, diskUsedBytes: 0, egressBytes: 0 }
          : { awake: false, memoryBytes: 0, diskUsedBytes: 0, egressBytes: 0 },
    });
    store.accounts.insert({ id: 'acc_x', keyHash: 'a'.repeat(64), keyEnc: '', phone: null, createdIp: '192.0.2.1', createdAt: 0, balanceUsd: 0 });
    for (const id of ['srv_run', 'srv_op']) {
      store.servers.insert({
        id,
        accountId: 'acc_x',
        slug: id.replace('_', '-'),
        sshPublicKey: '',
        keyFingerprint: id,
        memoryBytes: GB,
        diskBytes: GB,
        neverSleep: false,
        suspended: false,
        flag: null,
        createdAt: 0,
      });
    }
    store.servers.update('srv_op', () => ({ suspended: true, flag: OPERATOR_SUSPENDED }));
    const t0 = 1_000_000_000_000;
    await billing.tick(t0);
    await billing.tick(t0 + 6 * HOUR); // 12 GB-hours: the 10 GB-hour grant is used up
    await billing.tick(t0 + 55 * HOUR); // 48 h later: suspended
    assert.is(store.servers.get('srv_run')!.suspended, true);
    assert.ok(await billing.credit('acc_x', 5, 'admin:1'));
    assert.is(store.servers.get('srv_run')!.suspended, false, "billing's suspension ends");
    assert.is(store.servers.get('srv_op')!.suspended, true, "the operator's does not");
    assert.is(store.servers.get('srv_op')!.flag, OPERATOR_SUSPENDED);
    assert.not.ok(calls.includes('start srv_op'), calls.join(', '));
    assert.ok(calls.includes('start srv_run'), calls.join(', '));
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
