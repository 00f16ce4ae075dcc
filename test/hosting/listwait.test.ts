// GET /servers in a cluster waits a bounded time for each other host's part of the list
// (hosting/elsewhere.ts, LIST_WAIT_MS): a host that gives none in time is listed without. That
// wait runs on the daemon's clock (main.ts gives it to hosting), so a test moves it instead of
// waiting 3 s. The channel is a stand-in here: one other host that never answers.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { ServerForwarding } from '../../src/hosting/index.js';
import { send } from '../http/contract.js';
import { ManualClock } from '../helpers/clock.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

const API = 'api.localhost';
const clock = new ManualClock(Date.now());
let d: TestDaemon;

test.before(async () => {
  d = await startTestDaemon({}, {}, undefined, clock);
});
test.after(async () => {
  await d?.stop();
});

test("the list's wait for another host's part runs on the daemon's clock", async () => {
  const made = await send(d.http, API, 'POST', '/create', { body: {} });
  assert.is(made.status, 200, made.text);
  const asked: string[] = [];
  const silent: ServerForwarding = {
    placed: () => undefined,
    up: () => true,
    hostsOf: () => ['host-x'],
    refresh: async () => {},
    forward: async (host) => void asked.push(host), // never answers
    upgrade: () => {},
  };
  d.daemon.hosting.bindChannel(silent);

  let answered = false;
  const list = send(d.http, API, 'GET', '/servers', { headers: { authorization: `Bearer ${made.json.api_key}` } }).finally(() => (answered = true));
  for (let i = 0; i < 200 && !asked.length; i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(asked, ['host-x'], 'the other host is asked for its part');
  // a request behind it through the same daemon: whatever the list could do without the clock is done
  assert.is((await send(d.http, API, 'GET', '/healthz')).status, 200);
  assert.not.ok(answered, 'the list waits for the other host while the clock stands still');

  clock.advance(3000);
  const late = new Promise<'late'>((r) => setTimeout(() => r('late'), 1500).unref());
  const r = await Promise.race([list, late]);
  assert.ok(r !== 'late', 'answered once the clock passed the wait, not after 3 s of the system clock');
  assert.is(r.status, 200, r.text);
  assert.equal(
    r.json.servers.map((s: { id: string }) => s.id),
    [made.json.id],
    "this host's server listed, without the silent host's part",
  );
});

test.run();
