// Two daemons on one machine sharing a real PostgreSQL registry, each with its own store: the
// same x402 payment presented to both at the same instant pays for one verification run, the
// other answers payment_already_used, and the LLM sees one run's passes; with the registry down a
// paid call answers 503 registry_unavailable and nobody is charged.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // payments need no container
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RegistryPool } from '../../src/registry/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { LocalFacilitator } from '../payments/fixtures/facilitator.js';
import { LocalLlm } from '../verify/fixtures/llm.js';
import { MODELS, PAY_TO, payFor, verify } from '../verify/helpers.js';
import { initRegistry } from '../helpers/cluster.js';

let pg: TestPostgres;
let llm: LocalLlm;
let fac: LocalFacilitator;
let a: TestDaemon;
let b: TestDaemon;

const host = (name: string) =>
  startTestDaemon({
    cluster: { registry: pg.url, host: name, connectTimeout: '500ms', statementTimeout: '2s' },
    verify: {
      llm: { baseUrl: llm.url, models: MODELS, passTimeout: '3s' },
      x402: { payTo: PAY_TO, facilitatorUrl: fac.url, facilitatorTimeout: '2s', settleTimeout: '2s' },
    },
  });

test.before(async () => {
  pg = await startPostgres();
  const p = new RegistryPool({ url: pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  await initRegistry(p);
  await p.end();
  llm = await new LocalLlm().start();
  fac = await new LocalFacilitator().start();
  llm.script = () => ({ verdict: 'pass' });
  a = await host('host-a');
  b = await host('host-b');
});
test.after(async () => {
  await a?.stop();
  await b?.stop();
  await llm?.stop();
  await fac?.stop();
  await pg?.stop();
});

test('one payment presented to two hosts at once pays for exactly one run; the other is payment_already_used', async () => {
  const payment = await payFor(a.http, 'quick');
  const calls = llm.calls.length;
  const settles = fac.settleCalls;
  const [ra, rb] = await Promise.all([
    verify(a.http, 'quick', { artifact: 'one artifact' }, payment),
    verify(b.http, 'quick', { artifact: 'one artifact' }, payment),
  ]);
  assert.equal([ra.status, rb.status].sort(), [200, 402], `${ra.text.slice(0, 200)} ${rb.text.slice(0, 200)}`);
  assert.is((ra.status === 402 ? ra : rb).json.error, 'payment_already_used');
  assert.is(llm.calls.length - calls, 3, 'the passes of one run');
  assert.is(fac.settleCalls - settles, 1);
  assert.is(await pg.sql('SELECT count(*) FROM payment_locks'), '1');
  // and later, on either host, still used
  assert.is((await verify(b.http, 'quick', { artifact: 'one artifact' }, payment)).json.error, 'payment_already_used');
  assert.is((await verify(a.http, 'quick', { artifact: 'one artifact' }, payment)).json.error, 'payment_already_used');
});

test('a payment the facilitator rejects gives its registry lock back, so it can be presented again', async () => {
  const payment = await payFor(a.http, 'quick');
  fac.verifyMode = 'reject';
  try {
    assert.is((await verify(a.http, 'quick', { artifact: 'x' }, payment)).json.error, 'payment_rejected');
  } finally {
    fac.verifyMode = 'ok';
  }
  const again = await verify(b.http, 'quick', { artifact: 'x' }, payment);
  assert.is(again.status, 200, again.text.slice(0, 300));
});

test('with the registry down a paid call answers 503 registry_unavailable and nothing is run or charged', async () => {
  const payment = await payFor(a.http, 'quick');
  const calls = llm.calls.length;
  const settles = fac.settleCalls;
  await pg.halt();
  try {
    const r = await verify(a.http, 'quick', { artifact: 'x' }, payment);
    assert.is(r.status, 503, r.text.slice(0, 300));
    assert.is(r.json.error, 'registry_unavailable');
    assert.is(llm.calls.length, calls);
    assert.is(fac.settleCalls, settles);
  } finally {
    await pg.start();
  }
});

test.run();
