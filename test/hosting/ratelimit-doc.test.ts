// The per-IP limit's config reference names exactly what it covers: every hosting route is asked
// once the limit is spent, and the routes that still answer (not 429) are exactly the ones the
// description of hosting.rateLimit.perIpPerMinute names as exempt.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { configFields } from '../../src/config/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { get } from '../proxy/helpers.js';

let d: TestDaemon;

test.before(async () => {
  d = await startTestDaemon({ hosting: { rateLimit: { perIpPerMinute: 1, perKeyPerMinute: 1000 } } });
});

test.after(async () => {
  await d?.stop();
});

test('hosting.rateLimit.perIpPerMinute names exactly the hosting routes it does not cover', async () => {
  const field = configFields().find((f) => f.key === 'hosting.rateLimit.perIpPerMinute');
  assert.ok(field, 'the field is documented');
  const except = /except ([^(]*)\(/.exec(field!.description)?.[1] ?? '';
  const named = new Set([...except.matchAll(/\b(GET|POST|PUT|PATCH|DELETE) (\/[\w/.:-]*)/g)].map((m) => `${m[1]} ${m[2]}`));
  const spend = await get(d.http, 'api.localhost', '/servers');
  assert.is.not(spend.status, 429, 'the first request is within the limit');
  const exempt = new Set<string>();
  for (const r of d.daemon.hosting.router.routes) {
    const path = r.path.replace(/:\w+/g, 'srv_x');
    const body = r.method === 'POST' ? { headers: { 'content-type': 'application/json' }, body: '{}' } : {};
    const res = await get(d.http, 'api.localhost', path, { method: r.method, ...body });
    if (res.status !== 429) exempt.add(`${r.method} ${r.path}`);
  }
  assert.ok(exempt.size > 0, 'some routes are exempt');
  assert.equal([...named].sort(), [...exempt].sort(), `the description says: ${field!.description}`);
});

test.run();
