// The hosting API's caps under concurrent requests on a single box (issue 35 item 4): each cap is
// checked and reserved in the one store transaction that writes the pending server, so requests
// racing each other cannot all pass it.
//   - 8 anonymous creates at once from one address: exactly anonServersPerIp (3) servers;
//   - 6 creates at once with one account's key: exactly maxServersPerAccount (2) in all.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { send } from '../http/contract.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;

test.before(async () => {
  d = await startTestDaemon({ hosting: { maxServersPerAccount: 2, rateLimit: { perIpPerMinute: 1000, createsPerIpPerHour: 200 } } });
});
test.after(async () => {
  await d?.stop();
});

const create = (from: string, key?: string) =>
  send(d.http, 'api.localhost', 'POST', '/create', { from, body: {}, headers: key ? { authorization: `Bearer ${key}` } : {} });

test('8 concurrent anonymous creates from one address make exactly 3 servers; the rest answer 403 ip_limit', async () => {
  const all = await Promise.all(Array.from({ length: 8 }, () => create('127.0.20.1')));
  const made = all.filter((r) => r.status === 200);
  assert.is(made.length, 3, all.map((r) => `${r.status} ${r.json?.error ?? ''}`).join(', '));
  for (const r of all.filter((x) => x.status !== 200)) assert.is(r.json.error, 'ip_limit', r.text);
  const held = d.daemon.store.servers.all({ withPending: true }).filter((s) => d.daemon.store.accounts.get(s.accountId)?.createdIp === '127.0.20.1');
  assert.is(held.length, 3);
  const accounts = d.daemon.store.accounts.all().filter((a) => a.createdIp === '127.0.20.1');
  assert.is(accounts.length, 3, 'the accounts the refused creates made are dropped again');
});

test('6 concurrent creates with one key make the account exactly maxServersPerAccount (2) servers', async () => {
  const first = await create('127.0.20.2');
  assert.is(first.status, 200, first.text);
  const all = await Promise.all(Array.from({ length: 6 }, () => create('127.0.20.2', first.json.api_key)));
  assert.is(all.filter((r) => r.status === 200).length, 1, all.map((r) => `${r.status} ${r.json?.error ?? ''}`).join(', '));
  for (const r of all.filter((x) => x.status !== 200)) assert.is(r.json.error, 'server_limit', r.text);
  const account = d.daemon.store.accounts.byKeyHash(d.daemon.store.accounts.all().find((a) => a.createdIp === '127.0.20.2')!.keyHash)!;
  assert.is(d.daemon.store.servers.listByAccount(account.id, { withPending: true }).length, 2);
});

test.run();
