// Start-up resolution of what a stopped daemon left: a payment record still `locked` (its paid work
// was interrupted; nothing was sent for settlement) becomes abandoned and nothing is sent to the
// facilitator; a `pending` one is finished (here: settled by a repeated /settle) and its settled
// listener, registered only after the start-up pass (as billing is), still hears of it once. A
// daemon killed right after its pending mark, before lmdb committed it: the settlement journal
// makes the payment pending at the next start, and it is settled, not abandoned.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createLogger } from '../../src/log/index.js';
import { HttpFacilitator, Reconciler, type PaymentRecord } from '../../src/payments/index.js';
import { openStore, paymentKey } from '../../src/store/index.js';
import { until } from '../helpers/wait.js';
import { LocalFacilitator } from './fixtures/facilitator.js';
import { newPayer, signPayment, type Terms } from './fixtures/payer.js';
import { nodeArgs } from '../helpers/bundle.js';

const TERMS: Terms = {
  scheme: 'exact',
  network: 'eip155:84532',
  amount: '10000',
  asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
  payTo: '0x1111111111111111111111111111111111111111',
  maxTimeoutSeconds: 300,
  extra: { name: 'USDC', version: '2' },
};

test('at start-up a locked record is abandoned without a /settle, a pending one is settled and heard once by a listener registered later', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-recover-'));
  const store = openStore(dir);
  const fac = await new LocalFacilitator().start();
  try {
    const record = async (status: 'locked' | 'pending') => {
      const p = await signPayment(newPayer(), TERMS);
      const a = p.payload.authorization;
      const base = { asset: TERMS.asset, payer: a.from, nonce: a.nonce, purpose: 'recharge', meta: { account: 'acc_x', usd: '0.01' } };
      store.payments.lock({
        ...base,
        amount: TERMS.amount,
        network: TERMS.network,
        payTo: TERMS.payTo,
        resource: 'r',
        validBefore: Number(a.validBefore),
        lockedAt: Date.now(),
      });
      const key = paymentKey(TERMS.asset, a.from, a.nonce);
      if (status === 'pending') store.payments.update(key, { status: 'pending', settle: { payload: p, requirements: TERMS }, reason: 'settling' });
      return key;
    };
    const locked = await record('locked');
    const pending = await record('pending');
    const r = new Reconciler({
      facilitator: new HttpFacilitator({ url: fac.url, timeoutMs: 2000, settleTimeoutMs: 2000 }),
      store: store.payments,
      log: createLogger({ level: 'error', sink: () => {} }),
    });
    r.start(3_600_000);
    await until('the pending payment settled', () => store.payments.get(pending)?.status === 'settled');
    const heard: PaymentRecord[] = [];
    r.onSettled((rec) => heard.push(rec));
    await r.stop();
    assert.is(store.payments.get(locked)?.status, 'abandoned');
    assert.match(store.payments.get(locked)?.reason ?? '', /interrupted/);
    assert.is(fac.settleCalls, 1, 'one /settle: for the pending payment only');
    assert.is(fac.transfers.length, 1);
    assert.equal(
      heard.map((h) => h.nonce),
      [pending[2]],
    );
    assert.is(store.payments.pending().length, 0);
  } finally {
    await fac.stop();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a kill -9 right after the pending mark, before lmdb committed it: at the next start the payment is pending (the settlement journal) and settled once, not abandoned', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-recover-'));
  const fac = await new LocalFacilitator().start();
  const payload = await signPayment(newPayer(), TERMS);
  const a = payload.payload.authorization;
  const child = spawn(
    process.execPath,
    [...(await nodeArgs(new URL('../fixtures/settling-killed.ts', import.meta.url).pathname)), dir, JSON.stringify({ payload, requirements: TERMS })],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let err = '';
  child.stderr.on('data', (c) => (err += c));
  const signal = await new Promise<NodeJS.Signals | null>((r) => child.once('exit', (_code, sig) => r(sig)));
  assert.is(signal, 'SIGKILL', err);
  assert.match(readFileSync(join(dir, 'db', 'settling.journal'), 'utf8'), a.nonce.toLowerCase());
  const store = openStore(dir);
  try {
    const key = paymentKey(TERMS.asset, a.from, a.nonce);
    assert.is(store.payments.get(key)?.status, 'locked', 'lmdb did not commit the pending mark before the kill');
    const r = new Reconciler({
      facilitator: new HttpFacilitator({ url: fac.url, timeoutMs: 2000, settleTimeoutMs: 2000 }),
      store: store.payments,
      log: createLogger({ level: 'error', sink: () => {} }),
    });
    r.start(3_600_000);
    await until('the payment settled', () => store.payments.get(key)?.status === 'settled');
    await r.stop();
    assert.is(fac.settleCalls, 1, 'settled by the reconciler, from the settle request the journal kept');
    assert.is(fac.transfers.length, 1);
    assert.is(readFileSync(join(dir, 'db', 'settling.journal'), 'utf8'), '', 'the journal emptied at start');
  } finally {
    await fac.stop();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
