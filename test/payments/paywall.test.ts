// The generic x402 paywall against a real LMDB store and a local facilitator speaking the real
// protocol: good payments run the work once and settle once; every kind of wrong payment is
// refused before any network call or by the facilitator; failures never settle; unknown
// settlement outcomes become pending and are reconciled without charging twice.

import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { AppError } from '../../src/errors.js';
import { createLogger } from '../../src/log/index.js';
import { HttpFacilitator, NETWORKS, Paywall, Reconciler, type ChargeRequest, type PaymentRecord } from '../../src/payments/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import type { LmdbEnv } from '../../src/store/db.js';
import { LocalFacilitator } from './fixtures/facilitator.js';
import { encode, newPayer, signPayment, type PayOverrides } from './fixtures/payer.js';

const PAY_TO = '0x' + '5a'.repeat(20);
const log = createLogger({ level: 'error', sink: () => {} });
const dir = mkdtempSync(join(tmpdir(), 'rbx-paywall-'));
const store: Store = openStore(dir);
const fac = new LocalFacilitator();
let paywall: Paywall;
let reconciler: Reconciler;
const resource = { url: 'http://verify.localhost/v1/thing', description: 'a thing', mimeType: 'application/json' };
const AMOUNT = 100_000n;

test.before(async () => {
  await fac.start();
  // 1 s: the first verify checks a signature cold, which took over 400 ms with other test files running beside this one
  const http = new HttpFacilitator({ url: fac.url, timeoutMs: 1000, settleTimeoutMs: 1000 });
  paywall = new Paywall({ net: NETWORKS.base, payTo: PAY_TO, maxTimeoutSeconds: 300, facilitator: http, store: store.payments, log });
  reconciler = new Reconciler({ facilitator: http, store: store.payments, log });
});
test.after(async () => {
  await fac.stop();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});
test.before.each(() => {
  fac.verifyMode = 'ok';
  fac.settleMode = 'ok';
});

const payer = newPayer();
const terms = () => paywall.requirements(AMOUNT);
const header = async (o: PayOverrides = {}, account = payer) => encode(await signPayment(account, terms(), o));
const req = (h: Record<string, string>, amount = AMOUNT): ChargeRequest => ({ headers: h, amount, resource, purpose: 'test' });

async function refused(p: Promise<unknown>): Promise<AppError> {
  try {
    await p;
  } catch (e) {
    assert.instance(e, AppError, String(e));
    return e as AppError;
  }
  throw new Error('expected a refusal');
}

test('a valid payment runs the work once, settles once and answers PAYMENT-RESPONSE', async () => {
  const transfers = fac.transfers.length;
  let runs = 0;
  const paid = await paywall.charge(req({ 'x-payment': await header() }), async (p) => {
    runs++;
    assert.is(p.payer, payer.address);
    return 'done';
  });
  assert.is(runs, 1);
  assert.is(paid.result, 'done');
  assert.is(paid.settlement.status, 'settled');
  const resp = decodePaymentResponseHeader(paid.headers['payment-response']);
  assert.is(resp.success, true);
  assert.is(resp.transaction, fac.transfers.at(-1)!.transaction);
  assert.is(paid.headers['x-payment-response'], paid.headers['payment-response']);
  assert.is(fac.transfers.length, transfers + 1);
  assert.is(paywall.record(paid.payment.asset, paid.payment.payer, paid.payment.nonce)?.status, 'settled');
});

test('an unpaid request gets 402 terms the official client decodes', async () => {
  const e = await refused(paywall.charge(req({}), async () => 1));
  assert.is(e.code, 'payment_required');
  assert.is(e.headers?.['cache-control'], 'no-store');
  const terms = decodePaymentRequiredHeader(e.headers!['payment-required']);
  assert.is(terms.x402Version, 2);
  assert.equal(terms.accepts[0], {
    scheme: 'exact',
    network: 'eip155:8453',
    amount: '100000',
    asset: NETWORKS.base.asset,
    payTo: PAY_TO,
    maxTimeoutSeconds: 300,
    extra: { name: 'USD Coin', version: '2' },
  });
  assert.equal(terms.resource, resource);
});

test('a replayed payment is refused and the work does not run again', async () => {
  const h = await header();
  await paywall.charge(req({ 'payment-signature': h }), async () => 1);
  let ran = false;
  const e = await refused(paywall.charge(req({ 'x-payment': h }), async () => (ran = true)));
  assert.is(e.code, 'payment_already_used');
  assert.ok(e.headers?.['payment-required']);
  assert.is(ran, false);
});

test('the same payment sent 10 times at once runs the work once and settles once', async () => {
  const h = await header();
  const settles = fac.settleCalls;
  let runs = 0;
  const results = await Promise.allSettled(
    Array.from({ length: 10 }, () =>
      paywall.charge(req({ 'x-payment': h }), async () => {
        runs++;
        await new Promise((r) => setTimeout(r, 30));
        return runs;
      }),
    ),
  );
  assert.is(runs, 1);
  assert.is(results.filter((r) => r.status === 'fulfilled').length, 1);
  for (const r of results) if (r.status === 'rejected') assert.is((r.reason as AppError).code, 'payment_already_used');
  assert.is(fac.settleCalls, settles + 1);
});

test('wrong amount, recipient, network and asset are refused before the facilitator is asked', async () => {
  const calls = fac.verifyCalls;
  const other = '0x' + '77'.repeat(20);
  const cases: [PayOverrides, string][] = [
    [{ accepted: { amount: '1' }, value: '1' }, 'payment_wrong_amount'],
    [{ value: '1' }, 'payment_wrong_amount'],
    [{ accepted: { payTo: other }, to: other }, 'payment_wrong_recipient'],
    [{ to: other }, 'payment_wrong_recipient'],
    [{ accepted: { network: 'eip155:84532' } }, 'payment_wrong_network'],
    [{ accepted: { asset: NETWORKS['base-sepolia'].asset } }, 'payment_wrong_asset'],
    [{ accepted: { scheme: 'upto' } }, 'payment_wrong_scheme'],
  ];
  for (const [o, code] of cases) {
    const e = await refused(paywall.charge(req({ 'x-payment': await header(o) }), async () => assert.unreachable('work ran')));
    assert.is(e.code, code, JSON.stringify(o));
    assert.is(e.kind, 'payment_required');
  }
  // Paying 100000 for a 60000 resource is a wrong amount too (exact scheme).
  const e = await refused(paywall.charge(req({ 'x-payment': await header() }, 60_000n), async () => 1));
  assert.is(e.code, 'payment_wrong_amount');
  assert.is(fac.verifyCalls, calls);
});

test('expired, not-yet-valid and over-long authorizations are refused', async () => {
  const now = Math.floor(Date.now() / 1000);
  const cases: [PayOverrides, string][] = [
    [{ validBefore: String(now - 1) }, 'payment_expired'],
    [{ validBefore: String(now + 3) }, 'payment_expired'],
    [{ validAfter: String(now + 120) }, 'payment_not_yet_valid'],
    [{ validBefore: String(now + 86_400) }, 'payment_window_too_long'],
  ];
  for (const [o, code] of cases) assert.is((await refused(paywall.charge(req({ 'x-payment': await header(o) }), async () => 1))).code, code);
});

test('forged signatures are refused locally', async () => {
  const calls = fac.verifyCalls;
  const victim = newPayer();
  assert.is(
    (await refused(paywall.charge(req({ 'x-payment': await header({ claimFrom: victim.address }) }), async () => 1))).code,
    'payment_signature_invalid',
  );
  assert.is(
    (await refused(paywall.charge(req({ 'x-payment': await header({ domain: { chainId: 84532 } }) }), async () => 1))).code,
    'payment_signature_invalid',
  );
  assert.is((await refused(paywall.charge(req({ 'x-payment': await header({ domain: { name: 'USDC' } }) }), async () => 1))).code, 'payment_signature_invalid');
  const p = await signPayment(payer, terms());
  p.payload.signature = (p.payload.signature.slice(0, -4) + 'ffff') as `0x${string}`;
  assert.is((await refused(paywall.charge(req({ 'x-payment': encode(p) }), async () => 1))).code, 'payment_signature_invalid');
  assert.is(fac.verifyCalls, calls);
});

test('oversized and malformed payment headers are refused with 402', async () => {
  const big = await refused(paywall.charge(req({ 'x-payment': 'A'.repeat(9 * 1024) }), async () => 1));
  assert.is(big.code, 'payment_too_large');
  assert.ok(big.headers?.['payment-required']);
  for (const h of [
    '%%%',
    Buffer.from('{"x402Version":2}').toString('base64'),
    Buffer.from('[1,2]').toString('base64url'),
    Buffer.from('nope').toString('base64'),
  ]) {
    const e = await refused(paywall.charge(req({ 'x-payment': h }), async () => 1));
    assert.is(e.code, 'payment_invalid', h);
    assert.is(e.kind, 'payment_required');
  }
});

test('a payment the facilitator rejects is refused and stays usable later', async () => {
  fac.verifyMode = 'reject';
  const h = await header();
  const e = await refused(paywall.charge(req({ 'x-payment': h }), async () => 1));
  assert.is(e.code, 'payment_rejected');
  assert.match(e.detail, 'insufficient_funds');
  fac.verifyMode = 'ok';
  assert.is((await paywall.charge(req({ 'x-payment': h }), async () => 2)).result, 2);
});

test('a facilitator that hangs or answers garbage on /verify gives 502 within the deadline and charges nothing', async () => {
  for (const mode of ['hang', 'garbage', 'error500'] as const) {
    fac.verifyMode = mode;
    const started = Date.now();
    const e = await refused(paywall.charge(req({ 'x-payment': await header() }), async () => 1));
    assert.is(e.code, 'facilitator_unavailable', mode);
    assert.is(e.kind, 'upstream');
    assert.ok(Date.now() - started < 2000);
  }
});

test('when the paid work fails nothing is settled and the payment stays used', async () => {
  const settles = fac.settleCalls;
  const h = await header();
  const e = await refused(
    paywall.charge(req({ 'x-payment': h }), async () => {
      throw new AppError('upstream', 'llm_failed', 'boom');
    }),
  );
  assert.is(e.code, 'llm_failed');
  assert.is(fac.settleCalls, settles);
  const again = await refused(paywall.charge(req({ 'x-payment': h }), async () => 1));
  assert.is(again.code, 'payment_already_used');
});

test('a refused settlement answers 402 with the failure and no result', async () => {
  fac.settleMode = 'refuse';
  const e = await refused(paywall.charge(req({ 'x-payment': await header() }), async () => 'report'));
  assert.is(e.code, 'payment_settlement_failed');
  const resp = decodePaymentResponseHeader(e.headers!['payment-response']);
  assert.is(resp.success, false);
  assert.is(resp.errorReason, 'transaction_failed');
});

test('an unknown settlement outcome is recorded as pending and reconciled once, never charged twice', async () => {
  fac.settleMode = 'pending';
  const before = fac.transfers.length;
  const paid = await paywall.charge(req({ 'x-payment': await header() }), async () => 'report');
  assert.is(paid.result, 'report');
  assert.is(paid.settlement.status, 'pending');
  assert.is(decodePaymentResponseHeader(paid.headers['payment-response']).errorReason, 'settlement_pending');
  const rec = () => paywall.record(paid.payment.asset, paid.payment.payer, paid.payment.nonce)!;
  assert.is(rec().status, 'pending');
  assert.is(store.payments.pending().length, 1);
  const settled: PaymentRecord[] = [];
  reconciler.onSettled((r) => settled.push(r));
  fac.settleMode = 'ok';
  const sum = await reconciler.reconcile();
  assert.is(sum.settled, 1);
  assert.is(rec().status, 'settled');
  assert.is(rec().transaction, fac.transfers.at(-1)!.transaction);
  assert.is(fac.transfers.length, before + 1);
  assert.is(settled.length, 1);
  assert.is(store.payments.pending().length, 0);
  assert.equal(await reconciler.reconcile(), { settled: 0, refused: 0, expired: 0, pending: 0 });
});

test('a pending settlement whose retry finds the nonce used counts as settled; a facilitator still down keeps it pending', async () => {
  fac.settleMode = 'error500';
  const paid = await paywall.charge(req({ 'x-payment': await header() }), async () => 'r');
  assert.is(paid.settlement.status, 'pending');
  const rec = () => paywall.record(paid.payment.asset, paid.payment.payer, paid.payment.nonce)!;
  assert.equal(await reconciler.reconcile(), { settled: 0, refused: 0, expired: 0, pending: 1 });
  assert.is(rec().attempts, 2);
  // Meanwhile the authorization landed on chain (another attempt got through): the retry sees the nonce used.
  fac.settleMode = 'ok';
  const p = paid.payment.payload;
  await fetch(`${fac.url}/settle`, {
    method: 'POST',
    body: JSON.stringify({ x402Version: 2, paymentPayload: p, paymentRequirements: paid.payment.requirements }),
  });
  const transfers = fac.transfers.length;
  assert.is((await reconciler.reconcile()).settled, 1);
  assert.is(rec().status, 'settled');
  assert.is(fac.transfers.length, transfers);
});

test('without a payTo address every charge answers 503 not_configured', async () => {
  const p = new Paywall({
    net: NETWORKS.base,
    maxTimeoutSeconds: 300,
    facilitator: new HttpFacilitator({ url: fac.url, timeoutMs: 100, settleTimeoutMs: 100 }),
    store: store.payments,
    log,
  });
  assert.is(p.configured, false);
  const e = await refused(p.charge(req({ 'x-payment': await header() }), async () => 1));
  assert.is(e.code, 'not_configured');
  assert.is(e.kind, 'unavailable');
});

test('the facilitator client reads /supported', async () => {
  const s = await new HttpFacilitator({ url: fac.url, timeoutMs: 500, settleTimeoutMs: 500 }).supported();
  assert.ok(s.kinds.some((k) => k.network === 'eip155:8453' && k.scheme === 'exact' && k.x402Version === 2));
});

test('a paid call waits for one fdatasync, the lock’s, and no other commit: the pending mark is in the settlement journal before /settle, lmdb commits it and the outcome unwaited', async () => {
  // the payment store's real LMDB env, its write calls seen (txSync and txDurable wait for an fdatasync)
  const env = (store.payments as unknown as { env: LmdbEnv }).env;
  const calls: string[] = [];
  const commits: Promise<unknown>[] = [];
  const { txSync, txDurable, txCommitted } = env;
  env.txSync = <T>(fn: () => T): T => (calls.push('sync'), txSync.call(env, fn) as T);
  env.txDurable = <T>(fn: () => T): Promise<T> => (calls.push('durable'), txDurable.call(env, fn) as Promise<T>);
  // what the callers of txCommitted are given resolves only once the test lets it (lmdb commits as
  // usual): a charge that waited for the pending mark's or the outcome's commit would never answer
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  env.txCommitted = <T>(fn: () => T): Promise<T> => {
    calls.push('commit');
    const p = txCommitted.call(env, fn) as Promise<T>;
    commits.push(p);
    return held.then(() => p);
  };
  try {
    const charged = paywall.charge(req({ 'x-payment': await header() }), async () => 'done');
    const paid = await Promise.race([charged, new Promise<never>((_, no) => setTimeout(() => no(new Error('the charge waited for a commit')), 10_000))]);
    assert.is(paid.settlement.status, 'settled');
    assert.equal(calls, ['sync', 'commit', 'commit'], 'the lock synced; the pending mark and the outcome asked for, neither waited for');
    const rec = () => paywall.record(paid.payment.asset, paid.payment.payer, paid.payment.nonce);
    assert.is(rec()?.status, 'settled', 'the outcome is read back at once');
    assert.match(readFileSync(join(env.path, 'settling.journal'), 'utf8'), paid.payment.nonce.toLowerCase(), 'the pending mark is in the journal');
    release();
    await Promise.all(commits);
    assert.is(rec()?.status, 'settled', 'and once committed');
    assert.is(store.payments.pending().length, 0);
  } finally {
    release();
    for (const k of ['txSync', 'txDurable', 'txCommitted'] as const) delete (env as unknown as Record<string, unknown>)[k];
  }
});

test.run();
