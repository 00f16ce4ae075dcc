// Shared setup of the verify suites: a real daemon wired to a local OpenAI-compatible server and
// a local x402 facilitator, plus a payer that signs payments for the terms the daemon announces.

import { decodePaymentRequiredHeader } from '@x402/core/http';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { LocalFacilitator } from '../payments/fixtures/facilitator.js';
import { encode, newPayer, signPayment, type PayOverrides } from '../payments/fixtures/payer.js';
import { call, type Answer } from './fixtures/client.js';
import { LocalLlm } from './fixtures/llm.js';

export const PAY_TO = '0x' + '3c'.repeat(20);
export const MODELS = Array.from({ length: 10 }, (_, i) => `m${i}`);

export interface World {
  daemon: TestDaemon;
  llm: LocalLlm;
  fac: LocalFacilitator;
  port: number;
  stop(): Promise<void>;
}

export async function startWorld(extra: { passTimeout?: string; dataDir?: string } = {}): Promise<World> {
  const llm = await new LocalLlm().start();
  const fac = await new LocalFacilitator().start();
  let daemon: TestDaemon;
  try {
    daemon = await startTestDaemon({
      ...(extra.dataDir ? { dataDir: extra.dataDir } : {}),
      verify: {
        llm: { baseUrl: llm.url, models: MODELS, passTimeout: extra.passTimeout ?? '1500ms' },
        x402: { payTo: PAY_TO, facilitatorUrl: fac.url, facilitatorTimeout: '1s', settleTimeout: '1s' },
      },
    });
  } catch (e) {
    await llm.stop();
    await fac.stop();
    throw e;
  }
  return {
    daemon,
    llm,
    fac,
    port: daemon.http,
    async stop() {
      await daemon.stop();
      await llm.stop();
      await fac.stop();
    },
  };
}

export const payer = newPayer();

/** Asks the daemon for its terms (unpaid call) and signs a matching payment. */
export async function payFor(port: number, tier: string, o: PayOverrides = {}): Promise<string> {
  const r = await call(port, 'POST', `/v1/verify/${tier}`, { body: { artifact: 'terms please' } });
  if (r.status !== 402) throw new Error(`expected 402, got ${r.status} ${r.text}`);
  const terms = decodePaymentRequiredHeader(r.headers['payment-required']).accepts[0];
  return encode(await signPayment(payer, terms as never, o));
}

export const verify = (port: number, tier: string, body: object | string, payment?: string): Promise<Answer> =>
  call(port, 'POST', `/v1/verify/${tier}`, { body, headers: payment ? { 'x-payment': payment } : {} });
