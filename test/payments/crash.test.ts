// A crash during settlement: the real daemon as a child process (test/fixtures/paid-daemon.ts),
// SIGKILLed while a local facilitator has moved the money of a recharge but not answered /settle,
// then started again on the same data dir. The recharge is credited exactly once (also across a
// further restart), and the same payment presented again is payment_already_used. Both kinds of
// facilitator: one that answers a repeated /settle with the settlement it made, and one that,
// like the stateless reference facilitator, refuses it as a used nonce. And self-settlement on anvil:
// killed after the transfer was broadcast (automine off, so the daemon cannot have seen a receipt),
// the block mined while it is down, started again: credited exactly once, one transfer on chain.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeHeader } from '../../src/payments/index.js';
import { api } from '../hosting/helpers/killload.js';
import { until } from '../helpers/wait.js';
import { startChainWorld } from './fixtures/chainworld.js';
import { LocalFacilitator } from './fixtures/facilitator.js';
import { encode, newPayer, signPayment, type Terms } from './fixtures/payer.js';
import { nodeArgs } from '../helpers/bundle.js';

const FIXTURE = new URL('../fixtures/paid-daemon.ts', import.meta.url).pathname;
const PAY_TO = '0x1111111111111111111111111111111111111111';

interface Child {
  proc: ChildProcess;
  http: number;
  /** The last lines it logged (for a failure's message). */
  logs(): string;
  /** SIGKILL to the daemon's process group (the daemon and the server processes it started). */
  kill(): Promise<void>;
}

/** Starts the daemon child on `dataDir` in a process group of its own; resolves once it serves. */
async function daemon(overrides: Record<string, unknown>): Promise<Child> {
  const proc = spawn(process.execPath, [...(await nodeArgs(FIXTURE)), JSON.stringify(overrides)], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  let err = '';
  proc.stderr!.on('data', (c) => (err = (err + c).slice(-4000)));
  const http = await new Promise<number>((resolve, reject) => {
    createInterface({ input: proc.stdout! }).once('line', (l) => resolve((JSON.parse(l) as { http: number }).http));
    proc.once('exit', (code) => reject(new Error(`the daemon exited (${code}) before serving: ${err}`)));
  });
  return {
    proc,
    http,
    logs: () => err,
    async kill() {
      try {
        process.kill(-proc.pid!, 'SIGKILL');
      } catch {
        /* gone already */
      }
      await exited;
    },
  };
}

for (const idempotent of [true, false]) {
  test(`kill -9 during /settle, the money moved (${idempotent ? 'idempotent facilitator' : 'stateless facilitator: a repeat is refused as a used nonce'}): after a restart the recharge is credited exactly once, a replay is payment_already_used`, async () => {
    const fac = await new LocalFacilitator().start();
    fac.idempotent = idempotent;
    const dataDir = mkdtempSync(join(tmpdir(), 'rbx-paycrash-'));
    const overrides = {
      dataDir,
      publicIp: '127.0.0.1',
      verify: { x402: { payTo: PAY_TO, facilitatorUrl: fac.url, facilitatorTimeout: '2s', settleTimeout: '60s', reconcileInterval: '1h' } },
    };
    const children: Child[] = [];
    const start = async () => {
      const c = await daemon(overrides);
      children.push(c);
      return c;
    };
    try {
      let d = await start();
      const created = await api(d.http, 'POST', '/create');
      assert.is(created.status, 200, JSON.stringify(created.body));
      const key = created.body.api_key as string;
      const asked = await api(d.http, 'POST', '/account/recharge', { key, body: { usd: 2 } });
      assert.is(asked.status, 402);
      const terms = (decodeHeader(asked.headers['payment-required'] as string, 'PAYMENT-REQUIRED') as { accepts: Terms[] }).accepts[0];
      const payment = encode(await signPayment(newPayer(), terms));

      fac.settleMode = 'pending'; // moves the money, never answers
      const answer = api(d.http, 'POST', '/account/recharge', { key, body: { usd: 2 }, headers: { 'x-payment': payment } });
      await until('the facilitator moved the money', () => fac.transfers.length === 1, 30_000, 5);
      await d.kill();
      assert.is((await answer).status, 0, 'the request was cut off by the kill');
      fac.settleMode = 'ok';

      d = await start();
      const balance = async () => (await api(d.http, 'GET', '/credits', { key })).body.balance_usd as number;
      await until('the recharge credited after the restart', async () => (await balance()) === 2, 30_000).catch((e) => {
        throw new Error(`${(e as Error).message}; the daemon logged: ${d.logs()}`);
      });
      const replay = await api(d.http, 'POST', '/account/recharge', { key, body: { usd: 2 }, headers: { 'x-payment': payment } });
      assert.is(replay.status, 402);
      assert.is(replay.body.error, 'payment_already_used');
      assert.is(fac.transfers.length, 1, 'the money moved once');

      // once more: a further restart credits nothing again
      await d.kill();
      d = await start();
      const usage = await api(d.http, 'GET', '/usage', { key, headers: {} });
      const credits = (usage.body.entries as { kind: string; usd: number; source: string | null }[]).filter((e) => e.source?.startsWith('x402:'));
      assert.is(credits.length, 1, JSON.stringify(usage.body.entries));
      assert.is(await balance(), 2);
    } finally {
      for (const c of children) await c.kill();
      await fac.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
}

test('kill -9 after a self-settlement broadcast on anvil, mined while the daemon is down: after a restart credited exactly once, one transfer on chain', async () => {
  const w = await startChainWorld();
  const dataDir = mkdtempSync(join(tmpdir(), 'rbx-paycrash-'));
  const children: Child[] = [];
  const setAutomine = (on: boolean) => w.anvil.client.request({ method: 'evm_setAutomine' as never, params: [on] as never });
  const start = async () => {
    const c = await daemon({
      dataDir,
      publicIp: '127.0.0.1',
      verify: {
        x402: {
          payTo: w.payTo,
          network: 'custom',
          chainId: 31337,
          asset: w.token,
          assetName: 'USD Coin',
          assetVersion: '2',
          settlement: 'self',
          rpcUrl: w.anvil.url,
          gasKeyFile: w.gasKeyFile,
          minGasBalance: '0.01',
          facilitatorTimeout: '2s',
          settleTimeout: '60s',
          reconcileInterval: '1h',
        },
      },
    });
    children.push(c);
    return c;
  };
  try {
    let d = await start();
    const created = await api(d.http, 'POST', '/create');
    assert.is(created.status, 200, JSON.stringify(created.body));
    const key = created.body.api_key as string;
    const asked = await api(d.http, 'POST', '/account/recharge', { key, body: { usd: 3 } });
    assert.is(asked.status, 402);
    const terms = (decodeHeader(asked.headers['payment-required'] as string, 'PAYMENT-REQUIRED') as { accepts: Terms[] }).accepts[0];
    const payer = await w.payer(5_000_000n);
    const payment = encode(await signPayment(payer, terms));
    const payToBefore = await w.anvil.balance(w.token, w.payTo);

    await setAutomine(false);
    const sent = await w.anvil.client.getTransactionCount({ address: w.gas.address, blockTag: 'pending' });
    const answer = api(d.http, 'POST', '/account/recharge', { key, body: { usd: 3 }, headers: { 'x-payment': payment } });
    await until(
      'the transfer broadcast',
      async () => (await w.anvil.client.getTransactionCount({ address: w.gas.address, blockTag: 'pending' })) > sent,
      30_000,
      5,
    );
    await d.kill();
    assert.is((await answer).status, 0, 'the request was cut off by the kill');
    await setAutomine(true);
    await w.anvil.client.request({ method: 'evm_mine' as never, params: [] as never });
    assert.is((await w.anvil.balance(w.token, w.payTo)) - payToBefore, 3_000_000n, 'the money moved while the daemon was down');

    d = await start();
    const balance = async () => (await api(d.http, 'GET', '/credits', { key })).body.balance_usd as number;
    await until('the recharge credited after the restart', async () => (await balance()) === 3, 30_000).catch((e) => {
      throw new Error(`${(e as Error).message}; the daemon logged: ${d.logs()}`);
    });
    const replay = await api(d.http, 'POST', '/account/recharge', { key, body: { usd: 3 }, headers: { 'x-payment': payment } });
    assert.is(replay.status, 402);
    assert.is(replay.body.error, 'payment_already_used');
    await d.kill();
    d = await start();
    const usage = await api(d.http, 'GET', '/usage', { key });
    assert.is((usage.body.entries as { source: string | null }[]).filter((e) => e.source?.startsWith('x402:')).length, 1, JSON.stringify(usage.body.entries));
    assert.is(await balance(), 3);
    assert.is((await w.anvil.usedLogs(w.token, payer.address)).length, 1, 'one transfer');
    assert.is((await w.anvil.balance(w.token, w.payTo)) - payToBefore, 3_000_000n, 'paid once');
  } finally {
    for (const c of children) await c.kill();
    await setAutomine(true).catch(() => undefined);
    await w.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test.run();
