// Fair shares of the exposed-port pool against a real daemon (fast tier: its servers are processes): each tier may
// expose a configured number of ports per server and per account (403 `port_limit` with the
// limit beyond), so one tenant can no longer take the whole pool from the others.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect } from 'node:net';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { call, type Answer } from '../billing/api.js';

let d: TestDaemon;

test.before(async () => {
  d = await startTestDaemon({
    publicIp: '127.0.0.1',
    hosting: {
      anonServersPerIp: 10,
      rateLimit: { createsPerIpPerHour: 1000 },
      portPool: '24630-24645',
      portLimits: { anonymous: { perServer: 2, perAccount: 3 }, paid: { perServer: 4, perAccount: 6 } },
    },
  });
});
test.after(async () => {
  await d?.stop();
});

const create = async (key?: string) => {
  const r = await call(d.http, 'POST', '/create', { key });
  assert.is(r.status, 200, JSON.stringify(r.body));
  return { id: r.body.id as string, key: (r.body.api_key ?? key) as string };
};
const expose = (key: string, server: string, port: number) => call(d.http, 'POST', '/expose', { key, body: { server, port } });
const isLimit = (r: Answer, limit: number, scope: string) => {
  assert.is(r.status, 403, JSON.stringify(r.body));
  assert.is(r.body.error, 'port_limit');
  assert.match(r.body.detail, new RegExp(`at most ${limit}\\b`));
  assert.is(r.body.limit, limit);
  assert.is(r.body.scope, scope);
};

let a: { id: string; key: string };
let b: { id: string; key: string };

test('one anonymous server gets 2 ports of the pool, then 403 port_limit naming the limit; other tenants still get ports', async () => {
  a = await create();
  const answers = [];
  for (let port = 7001; port <= 7010; port++) answers.push(await expose(a.key, a.id, port));
  assert.equal(
    answers.slice(0, 2).map((r) => r.status),
    [200, 200],
  );
  for (const r of answers.slice(2)) isLimit(r, 2, 'server');
  assert.is(d.daemon.store.exposures.byServer(a.id).length, 2);
  const again = await expose(a.key, a.id, 7001);
  assert.is(again.status, 200, 'an exposed port is answered again, not counted twice');
  assert.equal(again.body, answers[0].body);

  const other = await create();
  const theirs = await expose(other.key, other.id, 7001);
  assert.is(theirs.status, 200, JSON.stringify(theirs.body));
  const port = Number(theirs.body.public.split(':')[1]);
  const sock = connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
  sock.destroy();
});

test('an anonymous account gets 3 ports over all its servers', async () => {
  b = await create(a.key);
  assert.is((await expose(a.key, b.id, 8001)).status, 200);
  isLimit(await expose(a.key, b.id, 8002), 3, 'account');
  assert.equal(
    (await call(d.http, 'GET', `/servers/${b.id}`, { key: a.key })).body.exposed_ports.map((p: { container_port: number }) => p.container_port),
    [8001],
  );
});

test('concurrent exposes of one server cannot pass the cap together', async () => {
  const c = await create();
  const answers = await Promise.all([1, 2, 3, 4, 5, 6].map((i) => expose(c.key, c.id, 9000 + i)));
  assert.is(answers.filter((r) => r.status === 200).length, 2, JSON.stringify(answers.map((r) => r.body)));
  for (const r of answers.filter((x) => x.status !== 200)) isLimit(r, 2, 'server');
  assert.is(d.daemon.store.exposures.byServer(c.id).length, 2);
});

test("unexposing frees a place; credit raises the caps to the paid tier's", async () => {
  assert.is((await call(d.http, 'DELETE', '/expose', { key: a.key, body: { server: a.id, port: 7002 } })).status, 200);
  assert.is((await expose(a.key, a.id, 7003)).status, 200);
  isLimit(await expose(a.key, a.id, 7004), 2, 'server');

  const account = d.daemon.store.servers.get(a.id)!.accountId;
  assert.ok(await d.daemon.billing.credit(account, 1, 'test:ports'));
  assert.is((await expose(a.key, a.id, 7004)).status, 200);
  assert.is((await expose(a.key, a.id, 7005)).status, 200);
  isLimit(await expose(a.key, a.id, 7006), 4, 'server');
  assert.is((await expose(a.key, b.id, 8002)).status, 200);
  isLimit(await expose(a.key, b.id, 8003), 6, 'account');
});

test.run();
