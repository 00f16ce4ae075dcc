// Self-settlement on a real chain: anvil with an EIP-3009 token compiled from source, a daemon
// with verify.x402.settlement "self" on the custom network eip155:31337, paid by the official
// @x402/fetch + @x402/evm client. The money is read back from the chain: who paid, who got it,
// the receipt, how many transfers used an authorization.

process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // a slow case, run in the container tier (issue 35 item 12); no server runs here
import { test } from 'uvu';
import { registry } from '../../src/metrics/registry.js';
import * as assert from 'uvu/assert';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from '@x402/fetch';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { callAdmin } from '../../src/admin/index.js';
import { paymentChecks } from '../../src/payments/index.js';
import { getAddress, parseSignature, type Hex } from 'viem';
import type { PrivateKeyAccount } from 'viem/accounts';
import { call as api } from '../billing/api.js';
import type { TestDaemon } from '../helpers/daemon.js';
import { call, hostFetch } from '../verify/fixtures/client.js';
import { TOKEN_ABI } from './fixtures/anvil.js';
import { startChainWorld, type ChainWorld } from './fixtures/chainworld.js';
import { encode, signPayment, type Terms } from './fixtures/payer.js';

let w: ChainWorld;
let d: TestDaemon;
/** How far the daemon's clock is ahead of the real one (a test moves it instead of waiting). */
let ahead = 0;

test.before(async () => {
  w = await startChainWorld();
  d = await w.daemon({ now: () => Date.now() + ahead });
});
test.after(async () => {
  await w?.stop();
});
test.after.each(async () => {
  ahead = 0;
  w.proxy.restore();
  w.llm.script = () => ({ verdict: 'pass' });
  await w.anvil.client.request({ method: 'evm_setAutomine' as never, params: [true] as never });
});

const body = JSON.stringify({ artifact: 'The sum 2 + 2 = 4 is right.' });
/** The official client, told (as a client of a non-default token must be) that this token is fine to spend. */
const payWith = (account: PrivateKeyAccount, port = d.http) =>
  wrapFetchWithPayment(
    hostFetch(port),
    registerExactEvmScheme(
      new x402Client().setSpendControls({ allowedAssets: [{ network: 'eip155:31337', asset: w.token, maxAmountPerPayment: '1000000' }] }),
      {
        signer: account,
      },
    ),
  );
const quick = (account: PrivateKeyAccount, port = d.http) =>
  payWith(account, port)('http://verify.localhost/v1/verify/quick', { method: 'POST', headers: { 'content-type': 'application/json' }, body });

async function terms(port = d.http): Promise<Terms> {
  const r = await call(port, 'POST', '/v1/verify/quick', { body });
  assert.is(r.status, 402, r.text);
  return decodePaymentRequiredHeader(r.headers['payment-required']).accepts[0] as Terms;
}
const paid = (header: string, port = d.http) => call(port, 'POST', '/v1/verify/quick', { body, headers: { 'x-payment': header } });
const bal = (who: Hex) => w.anvil.balance(w.token, who);
const gasTxs = () => w.anvil.client.getTransactionCount({ address: w.gas.address });

/** rootbox_settlement_transfers_total{result} of this process's registry (the daemon runs in it). */
async function transfers(result: string): Promise<number> {
  const m = await registry.getSingleMetric('rootbox_settlement_transfers_total')?.get();
  return m?.values.find((v) => v.labels.result === result)?.value ?? 0;
}

test('a paid quick verification settles on chain: payer −60000, payTo +60000, the receipt of PAYMENT-RESPONSE', async () => {
  const payer = await w.payer(1_000_000n);
  const before = await bal(w.payTo);
  w.llm.script = () => ({ verdict: 'pass' });
  const res = await quick(payer);
  assert.is(res.status, 200, await res.clone().text());
  assert.is((await res.json()).verdict, 'pass');
  const settle = decodePaymentResponseHeader(res.headers.get('payment-response')!);
  assert.is(settle.success, true);
  assert.is(settle.network, 'eip155:31337');
  const receipt = await w.anvil.client.getTransactionReceipt({ hash: settle.transaction as Hex });
  assert.is(receipt.status, 'success');
  assert.is(getAddress(receipt.from), w.gas.address, 'sent by the gas wallet');
  assert.is(await bal(payer.address), 1_000_000n - 60_000n);
  assert.is((await bal(w.payTo)) - before, 60_000n);
  const info = await call(d.http, 'GET', '/v1/info');
  assert.is(info.json.payment.settlement, 'self');
  assert.is(info.json.payment.available, true, JSON.stringify(info.json.payment));
  assert.is(info.json.payment.facilitator, null);
  assert.is(info.json.payment.gas_wallet.address, w.gas.address);
  const key = readFileSync(w.gasKeyFile, 'utf8').trim();
  assert.not.ok(JSON.stringify(d.logs).includes(key.slice(2)), 'the gas key never reaches the log');
});

test('a payer without the balance gets 402 before any LLM pass and nothing moves; the same payment, once funded, is taken', async () => {
  const payer = await w.payer(10_000n);
  const calls = w.llm.calls.length;
  const p = await signPayment(payer, await terms());
  const r = await paid(encode(p));
  assert.is(r.status, 402, r.text);
  assert.is(r.json.error, 'payment_rejected');
  assert.match(r.json.detail, /insufficient_funds/);
  assert.is(w.llm.calls.length, calls, 'no pass ran');
  assert.is(await bal(payer.address), 10_000n);
  // locked while it was verified, unlocked when rejected
  assert.is(d.daemon.payments.paywall.record(w.token, payer.address, p.payload.authorization.nonce), undefined);
  await w.anvil.mint(w.token, payer.address, 50_000n);
  const again = await paid(encode(p));
  assert.is(again.status, 200, again.text);
  assert.is(await bal(payer.address), 0n);
});

test('an authorization front-run on chain (its nonce already used) is refused before work', async () => {
  const payer = await w.payer(500_000n);
  const p = await signPayment(payer, await terms());
  const a = p.payload.authorization;
  const { r, s, v } = parseSignature(p.payload.signature as Hex);
  const hash = await w.anvil.wallet().writeContract({
    address: w.token,
    abi: TOKEN_ABI,
    functionName: 'transferWithAuthorization',
    args: [getAddress(a.from), getAddress(a.to), BigInt(a.value), BigInt(a.validAfter), BigInt(a.validBefore), a.nonce as Hex, Number(v), r, s],
  });
  await w.anvil.client.waitForTransactionReceipt({ hash });
  const calls = w.llm.calls.length;
  const res = await paid(encode(p));
  assert.is(res.status, 402, res.text);
  assert.is(res.json.error, 'payment_rejected');
  assert.match(res.json.detail, /nonce_already_used/);
  assert.is(w.llm.calls.length, calls);
  assert.is(await bal(payer.address), 440_000n, 'only the front-running transfer moved money');
});

test('an expired authorization is refused before work; one that expires during the work is not settled', async () => {
  const payer = await w.payer(500_000n);
  const t = await terms();
  const calls = w.llm.calls.length;
  const old = await paid(encode(await signPayment(payer, t, { validBefore: String(Math.floor(Date.now() / 1000) - 5) })));
  assert.is(old.status, 402);
  assert.is(old.json.error, 'payment_expired');
  assert.is(w.llm.calls.length, calls);
  // valid for 8 s; the passes take 9 s by the daemon's clock (moved while they run, not waited for)
  const p = await signPayment(payer, t, { validBefore: String(Math.floor(Date.now() / 1000) + 8) });
  w.llm.script = () => ((ahead = 9000), { verdict: 'pass' });
  const late = await paid(encode(p));
  w.llm.script = () => ({ verdict: 'pass' });
  ahead = 0;
  assert.is(late.status, 402, late.text);
  assert.is(late.json.error, 'payment_settlement_failed');
  assert.match(late.json.detail, /expired/);
  assert.is(await bal(payer.address), 500_000n, 'nothing moved');
  const rec = d.daemon.payments.paywall.record(w.token, payer.address, p.payload.authorization.nonce);
  assert.is(rec?.status, 'refused');
});

test('a payer who moves the balance away during the work: balance re-read before the broadcast, no transfer sent (no gas spent on a revert), refused, counted as withheld', async () => {
  const payer = await w.payer(100_000n);
  const t = await terms();
  const p = await signPayment(payer, t);
  // a second authorization of the whole balance to someone else, sent by another party while the passes run
  const drain = await signPayment(payer, t, { to: getAddress(w.gas.address), value: '100000' });
  const a = drain.payload.authorization;
  const { r, s, v } = parseSignature(drain.payload.signature as Hex);
  let sent: Promise<unknown> | undefined;
  w.llm.script = () => {
    sent ??= w.anvil
      .wallet()
      .writeContract({
        address: w.token,
        abi: TOKEN_ABI,
        functionName: 'transferWithAuthorization',
        args: [getAddress(a.from), getAddress(a.to), BigInt(a.value), BigInt(a.validAfter), BigInt(a.validBefore), a.nonce as Hex, Number(v), r, s],
      })
      .then((hash) => w.anvil.client.waitForTransactionReceipt({ hash }));
    return { verdict: 'pass', delayMs: 300 };
  };
  const payToBefore = await bal(w.payTo);
  const txs = await gasTxs();
  const [withheld, reverted] = [await transfers('withheld'), await transfers('reverted')];
  const res = await paid(encode(p));
  await sent;
  assert.is(res.status, 402, res.text);
  assert.is(res.json.error, 'payment_settlement_failed');
  assert.match(res.json.detail, /insufficient_funds/);
  assert.is(await bal(payer.address), 0n);
  assert.is(await bal(w.payTo), payToBefore, 'nothing paid to us');
  assert.is(await gasTxs(), txs, 'no transaction from the gas wallet');
  assert.is(await transfers('withheld'), withheld + 1, 'counted as withheld');
  assert.is(await transfers('reverted'), reverted, 'no reverted transfer');
  assert.is(d.daemon.payments.paywall.record(w.token, payer.address, p.payload.authorization.nonce)?.status, 'refused');
});

test('10 concurrent copies of one payment: one pass set, one transfer', async () => {
  const payer = await w.payer(1_000_000n);
  const header = encode(await signPayment(payer, await terms()));
  const calls = w.llm.calls.length;
  w.llm.script = () => ({ verdict: 'pass', delayMs: 200 });
  const all = await Promise.all(Array.from({ length: 10 }, () => paid(header)));
  w.llm.script = () => ({ verdict: 'pass' });
  const statuses = all.map((r) => r.status).sort();
  assert.equal(statuses, [200, 402, 402, 402, 402, 402, 402, 402, 402, 402], JSON.stringify(all.map((r) => r.json?.error)));
  assert.ok(all.filter((r) => r.status === 402).every((r) => r.json.error === 'payment_already_used'));
  assert.is(w.llm.calls.length - calls, 3, 'one pass set of a quick tier');
  assert.is(await bal(payer.address), 940_000n);
  assert.is((await w.anvil.usedLogs(w.token, payer.address)).length, 1, 'one transfer');
});

test('8 concurrent payments from different payers: each settled by its own transaction, gas nonces in order', async () => {
  const payers: PrivateKeyAccount[] = [];
  for (let i = 0; i < 8; i++) payers.push(await w.payer(100_000n)); // the minter sends one at a time
  const txs = await gasTxs();
  const all = await Promise.all(payers.map((p) => quick(p)));
  for (const r of all) assert.is(r.status, 200, await r.clone().text());
  const hashes = all.map((r) => decodePaymentResponseHeader(r.headers.get('payment-response')!).transaction as Hex);
  assert.is(new Set(hashes).size, 8);
  const nonces = await Promise.all(hashes.map(async (hash) => (await w.anvil.client.getTransaction({ hash })).nonce));
  assert.equal(
    [...nonces].sort((a, b) => a - b),
    Array.from({ length: 8 }, (_, i) => txs + i),
  );
  for (const p of payers) assert.is(await bal(p.address), 40_000n);
});

test('a gas wallet that falls below minGasBalance by paying gas turns the paid routes to 503', async () => {
  const thin = await w.daemon({ gasEth: '0.010000000000000001' }); // one wei over the minimum
  const ok = await quick(await w.payer(100_000n), thin.http);
  assert.is(ok.status, 200, await ok.clone().text());
  const until = Date.now() + 10_000;
  let info = await call(thin.http, 'GET', '/v1/info');
  while (info.json.payment.available && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 100));
    info = await call(thin.http, 'GET', '/v1/info');
  }
  assert.is(info.json.payment.available, false, JSON.stringify(info.json.payment));
  assert.is(info.json.payment.gas_wallet.ok, false);
  const r = await call(thin.http, 'POST', '/v1/verify/quick', { body });
  assert.is(r.status, 503);
  assert.is(r.json.error, 'payments_unavailable');
});

test('the RPC dropping right after the transfer was sent: pending with its hash, reconciled once the RPC is back, sent once', async () => {
  const payer = await w.payer(1_000_000n);
  const txs = await gasTxs();
  w.proxy.cutAfter('eth_sendRawTransaction');
  const res = await quick(payer);
  assert.is(res.status, 200, await res.clone().text());
  const s = decodePaymentResponseHeader(res.headers.get('payment-response')!);
  assert.is(s.success, false);
  assert.is(s.errorReason, 'settlement_pending');
  assert.match(s.transaction, /^0x[0-9a-f]{64}$/);
  const nonce = (await w.anvil.usedLogs(w.token, payer.address))[0]?.args.nonce as Hex;
  assert.ok(nonce, 'the transfer did land on chain');
  assert.is(d.daemon.payments.paywall.record(w.token, payer.address, nonce)?.status, 'pending');
  const down = await d.daemon.payments.reconciler.reconcile();
  assert.is(down.pending, 1, 'still pending while the RPC is away');
  w.proxy.restore();
  const back = await d.daemon.payments.reconciler.reconcile();
  assert.is(back.settled, 1);
  const rec = d.daemon.payments.paywall.record(w.token, payer.address, nonce)!;
  assert.is(rec.status, 'settled');
  assert.is(rec.transaction, s.transaction);
  assert.is(await gasTxs(), txs + 1, 'one transaction from the gas wallet');
  assert.is(await bal(payer.address), 940_000n);
  assert.is((await d.daemon.payments.reconciler.reconcile()).settled, 0);
});

test('the RPC down before the transfer was signed: pending, then submitted once when it returns', async () => {
  const payer = await w.payer(1_000_000n);
  const txs = await gasTxs();
  w.llm.script = () => {
    w.proxy.cut();
    return { verdict: 'pass' };
  };
  const res = await quick(payer);
  w.llm.script = () => ({ verdict: 'pass' });
  assert.is(res.status, 200, await res.clone().text());
  assert.is(decodePaymentResponseHeader(res.headers.get('payment-response')!).errorReason, 'settlement_pending');
  assert.is(await bal(payer.address), 1_000_000n, 'nothing sent yet');
  w.proxy.restore();
  assert.is((await d.daemon.payments.reconciler.reconcile()).settled, 1);
  assert.is(await bal(payer.address), 940_000n);
  assert.is(await gasTxs(), txs + 1);
});

test('a settlement pending when the daemon stops is finished by the next daemon from the chain', async () => {
  const dataDir = mkdtempSync(join(w.dir, 'data-'));
  const first = await w.daemon({ dataDir });
  const payer = await w.payer(1_000_000n);
  const txs = await gasTxs();
  w.proxy.cutAfter('eth_sendRawTransaction');
  const res = await quick(payer, first.http);
  assert.is(res.status, 200, await res.clone().text());
  const s = decodePaymentResponseHeader(res.headers.get('payment-response')!);
  assert.is(s.errorReason, 'settlement_pending');
  await first.stop();
  w.proxy.restore();
  const second = await w.daemon({ dataDir });
  assert.is((await second.daemon.payments.reconciler.reconcile()).settled, 1);
  const nonce = (await w.anvil.usedLogs(w.token, payer.address))[0].args.nonce as Hex;
  const rec = second.daemon.payments.paywall.record(w.token, payer.address, nonce)!;
  assert.is(rec.status, 'settled');
  assert.is(rec.transaction, s.transaction);
  assert.is(await gasTxs(), txs + 1);
});

test('a transaction the node dropped is re-broadcast as the same signed transaction, not a second one', async () => {
  const payer = await w.payer(1_000_000n);
  const txs = await gasTxs();
  await w.anvil.client.request({ method: 'evm_setAutomine' as never, params: [false] as never });
  const res = await quick(payer);
  assert.is(res.status, 200, await res.clone().text());
  const s = decodePaymentResponseHeader(res.headers.get('payment-response')!);
  assert.is(s.errorReason, 'settlement_pending', 'no block within the deadline');
  const hash = s.transaction as Hex;
  await w.anvil.client.request({ method: 'anvil_dropTransaction' as never, params: [hash] as never });
  const lost = await w.anvil.client.getTransaction({ hash }).then(
    () => false,
    () => true,
  );
  assert.ok(lost, 'the node lost the transaction');
  assert.is((await d.daemon.payments.reconciler.reconcile()).pending, 1, 'still no block');
  assert.is((await w.anvil.client.getTransaction({ hash })).hash, hash, 'the same signed transaction is back in the pool');
  assert.ok(d.logs.some((l) => l.msg === 're-broadcast a pending settlement transaction' && l.transaction === hash));
  await w.anvil.client.request({ method: 'evm_setAutomine' as never, params: [true] as never });
  await w.anvil.client.request({ method: 'evm_mine' as never, params: [] as never });
  assert.is((await d.daemon.payments.reconciler.reconcile()).settled, 1);
  const receipt = await w.anvil.client.getTransactionReceipt({ hash });
  assert.is(receipt.status, 'success', 'the re-broadcast transaction is the one that landed');
  const nonce = (await w.anvil.usedLogs(w.token, payer.address))[0].args.nonce as Hex;
  assert.is(d.daemon.payments.paywall.record(w.token, payer.address, nonce)?.transaction, hash);
  assert.is(await gasTxs(), txs + 1, 'one transaction from the gas wallet');
  assert.is(await bal(payer.address), 940_000n);
});

async function account(port: number) {
  const created = await api(port, 'POST', '/create');
  assert.is(created.status, 200, JSON.stringify(created.body));
  return created.body.api_key as string;
}

async function recharge(port: number, key: string, payer: PrivateKeyAccount, usd: number) {
  const unpaid = await api(port, 'POST', '/account/recharge', { key, body: { usd } });
  assert.is(unpaid.status, 402, JSON.stringify(unpaid.body));
  const t = decodePaymentRequiredHeader(unpaid.headers['payment-required'] as string).accepts[0] as Terms;
  const header = encode(await signPayment(payer, t));
  return { header, res: await api(port, 'POST', '/account/recharge', { key, body: { usd }, headers: { 'x-payment': header } }) };
}

test('a recharge settled on chain credits once; a replay is refused', async () => {
  const key = await account(d.http);
  const payer = await w.payer(5_000_000n);
  const { header, res } = await recharge(d.http, key, payer, 2);
  assert.is(res.status, 200, JSON.stringify(res.body));
  assert.is(res.body.settlement, 'settled');
  assert.is(res.body.credited_usd, 2);
  assert.is(res.body.credits.balance_usd, 2);
  const again = await api(d.http, 'POST', '/account/recharge', { key, body: { usd: 2 }, headers: { 'x-payment': header } });
  assert.is(again.status, 402);
  assert.is(again.body.error, 'payment_already_used');
  assert.is((await api(d.http, 'GET', '/credits', { key })).body.balance_usd, 2);
  assert.is(await bal(payer.address), 3_000_000n);
});

test('a recharge whose settlement is pending credits when it confirms, never twice', async () => {
  const key = await account(d.http);
  const payer = await w.payer(5_000_000n);
  w.proxy.cutAfter('eth_sendRawTransaction');
  const { res } = await recharge(d.http, key, payer, 1);
  assert.is(res.status, 200, JSON.stringify(res.body));
  assert.is(res.body.settlement, 'pending');
  assert.is(res.body.credited_usd, 0);
  assert.is((await api(d.http, 'GET', '/credits', { key })).body.balance_usd, 0);
  w.proxy.restore();
  assert.is((await d.daemon.payments.reconciler.reconcile()).settled, 1);
  await new Promise((r) => setTimeout(r, 200)); // the credit listener runs after the pass
  assert.is((await api(d.http, 'GET', '/credits', { key })).body.balance_usd, 1);
  await d.daemon.payments.reconciler.reconcile();
  await d.daemon.billing.onSettled({ purpose: 'recharge', payer: payer.address, nonce: '0x00', meta: {} }); // unrelated: ignored
  assert.is((await api(d.http, 'GET', '/credits', { key })).body.balance_usd, 1);
  assert.is(await bal(payer.address), 4_000_000n);
});

test('a gas wallet below minGasBalance: 503 payments_unavailable before any work, in /v1/info and the log', async () => {
  const poor = await w.daemon({ gasEth: '0' });
  const calls = w.llm.calls.length;
  const r = await call(poor.http, 'POST', '/v1/verify/quick', { body });
  assert.is(r.status, 503, r.text);
  assert.is(r.json.error, 'payments_unavailable');
  assert.match(r.json.detail, /gas wallet 0x[0-9a-fA-F]{40} holds 0 ETH, below minGasBalance 0.01/);
  const payer = await w.payer(1_000_000n);
  const res = await quick(payer, poor.http);
  assert.is(res.status, 503);
  assert.is(w.llm.calls.length, calls);
  const key = await account(poor.http);
  const recharge = await api(poor.http, 'POST', '/account/recharge', { key, body: { usd: 1 } });
  assert.is(recharge.status, 503);
  assert.is(recharge.body.error, 'payments_unavailable');
  const info = await call(poor.http, 'GET', '/v1/info');
  assert.is(info.json.payment.available, false);
  assert.is(info.json.payment.gas_wallet.ok, false);
  assert.ok(poor.logs.some((l) => l.level === 'warn' && JSON.stringify(l).includes('minGasBalance')));
  const status = await callAdmin(poor.dataDir, 'GET', '/status');
  const part = (status?.body.daemon as { parts: Record<string, Record<string, unknown>> }).parts.payments;
  assert.is(part.settlement, 'self');
  assert.is(part.available, false);
  assert.match(String(part.problems), /below minGasBalance/);
  const [poorRow] = await paymentChecks(poor.cfg.verify.x402);
  assert.is(poorRow.ok, false);
  assert.match(poorRow.detail, /below minGasBalance/);
  const [row] = await paymentChecks(d.cfg.verify.x402);
  assert.is(row.ok, true, row.detail);
  assert.match(row.detail, /self-settlement on eip155:31337, gas wallet 0x[0-9a-fA-F]{40}: usable, gas 0\.9\d* ETH \(min 0\.01\)/);
});

test('a token whose EIP-712 domain is not the configured one, or an RPC of another chain: 503 before any work', async () => {
  const named = await w.daemon({ x402: { assetName: 'USDC' } });
  const r = await call(named.http, 'POST', '/v1/verify/quick', { body });
  assert.is(r.status, 503);
  assert.is(r.json.error, 'payments_unavailable');
  assert.match(r.json.detail, /the token's EIP-712 domain is not \{name "USDC", version "2", chain 31337, 0x[0-9a-fA-F]{40}\}/);
  const other = await w.daemon({ x402: { chainId: 8453 } });
  const o = await call(other.http, 'POST', '/v1/verify/quick', { body });
  assert.is(o.status, 503);
  assert.match(o.json.detail, /the RPC serves chain 31337, the network is eip155:8453/);
});

test('a gas key file others can read is refused at start, naming the fix', async () => {
  const file = join(w.dir, 'loose.key');
  writeFileSync(file, readFileSync(w.gasKeyFile, 'utf8'));
  chmodSync(file, 0o644);
  const err = await w.daemon({ x402: { gasKeyFile: file } }).then(
    () => null,
    (e: Error) => e,
  );
  assert.ok(err);
  assert.match(err!.message, /gasKeyFile is readable by others \(mode 644\); chmod 600 it/);
});

test.run();
