// Billing's resume is fenced like every other start (issue 29): two daemons on one real
// PostgreSQL registry, servers as plain processes. An account of host A used up its grant and had
// its three servers suspended (stopped); while they were, the registry moved one of them to host
// B (a newer epoch there) and deleted another (its placement's tombstone). Credit brings the
// account back: A starts the server still placed on it and neither of the other two — the
// registry's wake fence refuses them in the runtime's start, which every start goes through
// (before, billing's resume called the runtime's start without asking the fence and ran both).
// Time is moved by calling A's billing pass with a chosen clock.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // the fence is the daemon's, not the container's
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { ProcessRuntime } from '../helpers/procruntime.js';
import { api, startTwoHosts, type TwoHosts } from './fixtures/twohosts.js';

const HOUR = 3_600_000;
let c: TwoHosts;
let clock = Date.now() + HOUR;
let key = '';
let account = '';
/** The account's servers on A: the one that stays placed on A, the one moved to B, the one deleted. */
const ids = { stays: '', moved: '', deleted: '' };

test.before(async () => {
  c = await startTwoHosts({ billing: { grantRamGbHours: 0.001, verifiedGrantRamGbHours: 0.001, grantEgressGb: 1, meterInterval: '1h', suspendAfter: '2h' } });
  const first = await api(c.a, 'POST', '/create', { body: {} });
  assert.is(first.status, 200, first.text);
  ({ api_key: key, id: ids.stays } = first.json as { api_key: string; id: string });
  for (const k of ['moved', 'deleted'] as const) {
    const r = await api(c.a, 'POST', '/create', { key, body: {} });
    assert.is(r.status, 200, r.text);
    ids[k] = r.json.id as string;
  }
  account = c.a.daemon.store.servers.get(ids.stays)!.accountId;
});
test.after(async () => {
  await c?.stop();
});

const state = (id: string) => c.a.daemon.runtime.get(id)?.state;
const placement = (id: string) => c.pg.sql(`SELECT host || ' ' || epoch FROM placements WHERE server_id = '${id}'`);

test('a resumed account starts only its servers the registry still places on this host', async () => {
  // the grant is used up: exhausted at one pass, suspended (servers stopped) suspendAfter later
  await c.a.daemon.billing.tick((clock += HOUR));
  await c.a.daemon.billing.tick((clock += 2 * HOUR));
  await c.a.daemon.billing.tick((clock += 3 * HOUR));
  for (const id of Object.values(ids)) {
    assert.is(c.a.daemon.store.servers.get(id)?.suspended, true, `${id} suspended`);
    assert.is(state(id), 'sleeping', `${id} stopped`);
  }
  // while they sleep, the registry moves one to B and deletes another (a tombstone is left)
  await c.pg.sql(`UPDATE placements SET host = 'host-b', epoch = epoch + 1 WHERE server_id = '${ids.moved}'`);
  await c.pg.sql(`DELETE FROM placements WHERE server_id = '${ids.deleted}'`);
  assert.is(await placement(ids.moved), 'host-b 2');
  assert.is(await placement(ids.deleted), '');
  const rt = c.a.daemon.runtime as ProcessRuntime;
  const starts = rt.starts;

  assert.ok(await c.a.daemon.billing.credit(account, 1, 'test:resume-fenced'));

  assert.is(state(ids.stays), 'running', 'the server still placed on A is started');
  assert.is(state(ids.moved), 'sleeping', 'the server placed on B is not started on A');
  assert.is(state(ids.deleted), 'sleeping', 'the server the registry deleted is not started on A');
  assert.is(rt.starts, starts + 1, 'one process started');
  for (const id of Object.values(ids)) assert.is(c.a.daemon.store.servers.get(id)?.suspended, false, `${id} no longer suspended by billing`);
  const moved = c.a.logs.find((l) => l.msg === 'not starting a server the registry places on another host' && l.server === ids.moved);
  assert.ok(moved, 'the refusal of the moved server is logged');
  assert.is(moved!.host, 'host-b');
  assert.is(moved!.epoch, 2);
  assert.ok(
    c.a.logs.some((l) => l.msg === 'not starting a server the registry deleted' && l.server === ids.deleted),
    'the refusal of the deleted server is logged',
  );
  assert.is(c.a.daemon.registry!.fence.refused, 2);
  assert.is(await placement(ids.moved), 'host-b 2', 'the placement is left as the registry has it');
});

test.run();
