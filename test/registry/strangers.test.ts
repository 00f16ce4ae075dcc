// What a stranger costs the registry (issue 29: every shared resource has a per-source bound):
// two daemons on one real PostgreSQL registry, servers as plain processes, every query B's
// registry pool sends observed.
//   - SSH logins on B with keys no server has: answered from B's memory (the placement cache
//     keeps every server's key), no registry read names any of them and the reads they cause
//     stay bounded; the real key of A's server still logs in through B (relayed to A), one
//     created on A a moment before is reached through B at once, and once deleted it is refused;
//   - HTTP-01 tokens B does not hold, sprayed from one address: bounded registry reads, while a
//     token A's order holds is answered by B to another address; sprayed from many addresses, the
//     reads stay within the host's budget and the CA still gets A's token from B (from memory);
//   - API requests on B with random api keys and random server ids from one address: bounded
//     registry statements, while from that same address the real key of an account made on A
//     still works on B, a server of A is reached through B, and a key made on A a moment ago works
//     on B from another address.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
import { createHash, randomBytes } from 'node:crypto';
import ssh2 from 'ssh2';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { generateServerKeyPair } from '../../src/ssh/index.js';
import { send } from '../http/contract.js';
import type { TestDaemon } from '../helpers/daemon.js';
import { until } from '../helpers/wait.js';
import { api, startTwoHosts, type TwoHosts } from './fixtures/twohosts.js';

/** Registry reads one source may cause at once, then per second (src/misses.ts). */
const SOURCE_BURST = 8;
const SOURCE_RATE = 4;
/** The same for every source together. */
const HOST_BURST = 50;
const HOST_RATE = 20;

let hosts: TwoHosts;
let a: TestDaemon;
let b: TestDaemon;

test.before(async () => {
  hosts = await startTwoHosts();
  ({ a, b } = hosts);
  for (const d of [a, b]) for (const name of ['host-a', 'host-b']) await until(`${name} up`, () => d.daemon.registry!.placements.host(name)?.up, 5000);
});
test.after(async () => {
  await hosts?.stop();
});

/** Every statement B's registry pool is asked from now until `stop()`. */
function observe(d: TestDaemon): { seen: { sql: string; params: unknown[] }[]; stop(): void } {
  const pool = d.daemon.registry!.pool;
  const seen: { sql: string; params: unknown[] }[] = [];
  const query = pool.query;
  pool.query = ((sql: string, params: unknown[] = []) => (seen.push({ sql, params }), query.call(pool, sql, params))) as typeof pool.query;
  return { seen, stop: () => void (pool.query = query) };
}

/** One SSH connection to `d` from `from` offering `keys` (OpenSSH private keys) in turn: 'ready'
 *  (the connection kept until `held` is true) or the client's error. */
function login(d: TestDaemon, keys: string[], from = '127.0.0.1', held?: () => boolean): Promise<string> {
  return new Promise((resolve) => {
    const c = new ssh2.Client();
    c.on(
      'ready',
      () =>
        void (held ? until('the login to be held', held, 10_000) : Promise.resolve()).then(
          () => (c.end(), resolve('ready')),
          (e: Error) => (c.end(), resolve(`ready, then ${e.message}`)),
        ),
    );
    c.on('error', (e) => resolve(`error: ${e.message}`));
    c.connect({
      host: '127.0.0.1',
      port: d.daemon.ssh.port,
      localAddress: from,
      username: 'root',
      authHandler: keys.map((key) => ({ type: 'publickey', username: 'root', key })) as never,
      readyTimeout: 15_000,
    });
  });
}

async function createOn(d: TestDaemon): Promise<{ id: string; api_key: string; ssh_private_key: string }> {
  const r = await api(d, 'POST', '/create', { body: {} });
  assert.is(r.status, 200, r.text);
  return r.json;
}

const forwarded = (id: string) => a.logs.filter((l) => l.msg === 'ssh login' && l.server === id && l.forwarded === true).length;

test('logins on B with keys no server has cost no registry read of those keys, and bounded reads in all; the real key of a server on A still logs in through B, one created a moment ago too, a deleted one no more', async () => {
  const far = await createOn(a);
  const strangers = Array.from({ length: 100 }, (_, i) => generateServerKeyPair(`stranger${i}`));
  const fingerprints = new Set(strangers.map((k) => k.fingerprint));
  const seen = observe(b);
  const t0 = performance.now();
  try {
    // 20 connections from one address, five keys each (under the server's six tries a connection)
    for (let i = 0; i < strangers.length; i += 5) {
      const r = await login(
        b,
        strangers.slice(i, i + 5).map((k) => k.privateKey),
        '127.0.0.21',
      );
      assert.match(r, /All configured authentication methods failed/);
    }
  } finally {
    seen.stop();
  }
  const secs = (performance.now() - t0) / 1000;
  const named = seen.seen.filter((q) => q.params.some((p) => typeof p === 'string' && fingerprints.has(p)));
  console.log(`    ${strangers.length} unknown keys in ${secs.toFixed(2)} s: ${seen.seen.length} registry statements on B, ${named.length} naming a key`);
  assert.is(named.length, 0, 'no registry read asks about a stranger’s key');
  // what B's timers read anyway (lease, hosts, catch-up: about three a second) plus the misses' budget
  const bound = SOURCE_BURST + Math.ceil(secs + 1) * (SOURCE_RATE + 4);
  assert.ok(seen.seen.length <= bound, `${seen.seen.length} statements for ${strangers.length} unknown keys in ${secs.toFixed(2)} s (bound ${bound})`);

  // the stranger's address is over its budget: a real key is still answered from memory and relayed to A
  const before = forwarded(far.id);
  assert.is(await login(b, [far.ssh_private_key], '127.0.0.21', () => forwarded(far.id) > before), 'ready', 'A takes the login B relays');

  // the copy in memory follows the registry: a server created on A is reached through B at once, deleted it is refused
  const made = await createOn(a);
  assert.is(await login(b, [made.ssh_private_key], '127.0.0.1', () => forwarded(made.id) === 1), 'ready', 'A takes the login B relays');
  assert.is((await api(a, 'DELETE', `/servers/${made.id}`, { key: made.api_key })).status, 200);
  await until(
    'B refuses the deleted server’s key',
    async () => /All configured authentication methods failed/.test(await login(b, [made.ssh_private_key])),
    10_000,
  );
});

test('HTTP-01 tokens B does not hold, sprayed from one address, cost bounded registry reads; a token A holds is answered by B', async () => {
  const tokens = Array.from({ length: 60 }, (_, i) => `spray${i}x${Date.now().toString(36)}`);
  const asked = new Set(tokens);
  const seen = observe(b);
  const t0 = performance.now();
  try {
    for (const t of tokens) {
      const r = await send(b.http, 'shop.example.net', 'GET', `/.well-known/acme-challenge/${t}`, { from: '127.0.0.22' });
      assert.is.not(r.status, 200);
    }
  } finally {
    seen.stop();
  }
  const secs = (performance.now() - t0) / 1000;
  const reads = seen.seen.filter((q) => q.params.some((p) => typeof p === 'string' && asked.has(p))).length;
  const bound = SOURCE_BURST + Math.ceil(secs * SOURCE_RATE);
  console.log(`    ${tokens.length} unknown tokens in ${secs.toFixed(2)} s: ${reads} registry reads on B (bound ${bound})`);
  assert.ok(reads <= bound, `${reads} registry reads for ${tokens.length} tokens in ${secs.toFixed(2)} s`);

  const token = `real${Date.now().toString(36)}`;
  await a.daemon.acme.http01.set(token, `${token}.thumbprint`);
  try {
    const r = await send(b.http, 'shop.example.net', 'GET', `/.well-known/acme-challenge/${token}`, { from: '127.0.0.23' });
    assert.is(r.status, 200);
    assert.is(r.text, `${token}.thumbprint`);
  } finally {
    await a.daemon.acme.http01.delete(token);
  }
});

test('HTTP-01 tokens sprayed from many addresses cost at most the host’s budget of reads; a token A holds is still answered by B meanwhile', async () => {
  const token = `held${Date.now().toString(36)}`;
  await a.daemon.acme.http01.set(token, `${token}.thumbprint`);
  try {
    const asked = new Set<string>();
    const seen = observe(b);
    const t0 = performance.now();
    let spraying = true;
    // 20 addresses at once, round after round, until the CA's request below is answered
    const sprayer = (async () => {
      for (let i = 0; spraying; i++)
        await Promise.all(
          Array.from({ length: 20 }, async (_, j) => {
            const t = `wide${i}x${j}x${Date.now().toString(36)}`;
            asked.add(t);
            const r = await send(b.http, 'shop.example.net', 'GET', `/.well-known/acme-challenge/${t}`, { from: `127.0.1.${j + 1}` });
            assert.is.not(r.status, 200);
          }),
        );
    })();
    let r;
    try {
      await until('the host’s budget spent', () => asked.size >= 2 * HOST_BURST + 20, 10_000, 1);
      // the CA, from an address of its own, during the spray
      r = await send(b.http, 'shop.example.net', 'GET', `/.well-known/acme-challenge/${token}`, { from: '127.0.0.24' });
    } finally {
      spraying = false;
      await sprayer;
      seen.stop();
    }
    const secs = (performance.now() - t0) / 1000;
    const reads = seen.seen.filter((q) => q.params.some((p) => typeof p === 'string' && asked.has(p))).length;
    const bound = HOST_BURST + Math.ceil(secs * HOST_RATE);
    console.log(`    ${asked.size} unknown tokens from 20 addresses in ${secs.toFixed(2)} s: ${reads} registry reads on B (bound ${bound})`);
    assert.ok(reads <= bound, `${reads} registry reads for ${asked.size} tokens in ${secs.toFixed(2)} s`);
    assert.is(r.status, 200, 'the token A holds is answered by B during the spray');
    assert.is(r.text, `${token}.thumbprint`);
  } finally {
    await a.daemon.acme.http01.delete(token);
  }
});

/** A well-formed api key no account has. */
const randomKey = () =>
  `rbx_${randomBytes(24)
    .toString('base64')
    .replace(/[^0-9A-Za-z]/g, 'x')
    .slice(0, 32)}`;

test('random api keys and server ids from one address cost bounded registry statements; a real key of an account of A still works on B from it, a key made a moment ago from another', async () => {
  const far = await createOn(a);
  const hash = createHash('sha256').update(far.api_key).digest('hex');
  await until('B knows the key of A’s account', () => b.daemon.registry!.placements.accountKeys.byHash(hash), 5000);
  const from = '127.0.0.25';
  const seen = observe(b);
  const t0 = performance.now();
  const statuses = new Map<number, number>();
  try {
    for (let i = 0; i < 200; i++) {
      const id = `srv_${randomBytes(8).toString('hex')}`;
      const r = await send(b.http, 'api.localhost', 'GET', i % 2 ? `/servers/${id}` : '/servers', {
        from,
        headers: { authorization: `Bearer ${randomKey()}` },
      });
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
    }
  } finally {
    seen.stop();
  }
  const secs = (performance.now() - t0) / 1000;
  console.log(
    `    200 random keys (100 with random server ids) in ${secs.toFixed(2)} s: ${seen.seen.length} registry statements on B; answers ${[...statuses].map(([k, v]) => `${k}×${v}`).join(' ')}`,
  );
  // 401 for those read (or asked again within a second); beyond the budget, unread: 429 with
  // Retry-After (such a key may be one made on another host a moment ago)
  assert.equal([...statuses.keys()].sort(), [401, 429]);
  // a miss spends one token of the source's budget and costs at most two statements; plus B's timers
  const bound = 2 * SOURCE_BURST + Math.ceil(secs + 1) * (2 * SOURCE_RATE + 4);
  assert.ok(seen.seen.length <= bound, `${seen.seen.length} statements for 200 random keys in ${secs.toFixed(2)} s (bound ${bound})`);

  // the same address, over its budget: a real key of A's account is known from memory, A's server reached through B
  const list = await send(b.http, 'api.localhost', 'GET', '/servers', { from, headers: { authorization: `Bearer ${far.api_key}` } });
  assert.is(list.status, 200, list.text);
  assert.ok(
    (list.json.servers as { id: string }[]).some((x) => x.id === far.id),
    'A’s server listed through B',
  );
  const one = await send(b.http, 'api.localhost', 'GET', `/servers/${far.id}`, { from, headers: { authorization: `Bearer ${far.api_key}` } });
  assert.is(one.status, 200, one.text);
  // a key made on A a moment ago works on B at once
  const fresh = await createOn(a);
  const now = await send(b.http, 'api.localhost', 'GET', '/servers', { from: '127.0.0.26', headers: { authorization: `Bearer ${fresh.api_key}` } });
  assert.is(now.status, 200, now.text);
});

test.run();
