// The channel's start survives a registry hiccup (issue 35 review, finding 5; src/channel/index.ts):
// a start whose read of the cluster CA fails, then whose key registration fails (this run's name
// not claimed yet), is tried again with a back-off that doubles — not at once, not given up for
// the run — and once both succeed the listener is open and takes a registered peer. Meanwhile a
// request for another host's server answers 503 host_unavailable. Real TLS and HTTP/2 on
// loopback under a real cluster CA; the registry is the channel's interface to it, failing on
// cue; the back-off's time is moved by hand.

import { request } from 'node:http';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startChannel, START_RETRY_MS, type Channel } from '../../src/channel/index.js';
import { issueIdentity } from '../../src/channel/identity.js';
import { Peers } from '../../src/channel/sender-peers.js';
import { createCa } from '../../src/edge/index.js';
import { AppError } from '../../src/errors.js';
import { createLogger } from '../../src/log/index.js';
import type { CaPair } from '../../src/registry/index.js';
import { ManualClock } from '../helpers/clock.js';
import { until } from '../helpers/wait.js';

const log = createLogger({ level: 'error', sink: () => {} });
const name = 'rootbox cluster CA';
const pair: CaPair = { name, ...createCa(name) };
const other = issueIdentity(pair, 'host-b');

test('a failed CA read, then a failed key registration, are tried again after 1 s then 2 s; then the channel listens', async () => {
  const clock = new ManualClock();
  const calls = { load: 0, register: 0 };
  const registered = new Map([['host-b', other.keyId]]);
  const registry = {
    host: 'host-a',
    channel: {
      load: async () => {
        if (++calls.load === 1) throw AppError.of('registry_unavailable', 'the registry did not answer');
        return pair;
      },
    },
    registerChannelKey: async (key: string) => {
      if (++calls.register === 1) throw AppError.of('host_name_taken', 'this run does not hold the host name host-a yet');
      registered.set('host-a', key);
    },
    hosts: { channelKey: async (host: string) => registered.get(host) },
    placements: {
      bySlug: () => undefined,
      byServer: (id: string) => (id === 'srv_b1' ? { serverId: id, slug: 'b1', host: 'host-b', epoch: 1 } : undefined),
      fresh: async () => undefined,
      host: (n: string) => (n === 'host-b' ? { name: n, advertise: '127.0.0.1:9', up: true } : undefined),
      ofAccount: () => [],
      sync: async () => {},
    },
  };
  const c = (await startChannel({
    cfg: { cluster: { listen: '127.0.0.1:0', forwardConnectTimeout: 1000, forwardRetryBody: 1024, forwardRetryPerSource: 4096, forwardRetryTotal: 65536 } },
    log,
    registry,
    store: { servers: { bySlug: () => undefined, get: () => undefined } },
    proxy: { handle: (_req, res) => void res.writeHead(404).end() },
    clock,
  })) as Channel | undefined;
  assert.ok(c, 'a channel, not given up for the run');
  try {
    assert.is(c.port, 0, 'not listening yet');
    assert.equal(calls, { load: 1, register: 0 });

    // meanwhile an API request for host-b's server: 503 host_unavailable, at once
    const shim: Server = createServer(
      (req, res) => void c.forwardApi('host-b', req, res, { host: 'api.localhost', scheme: 'http', requestId: 'retry-test-0001', ip: '127.0.0.1' }),
    );
    await new Promise<void>((r) => shim.listen(0, '127.0.0.1', r));
    const status = await new Promise<number>((resolve, reject) =>
      request({ host: '127.0.0.1', port: (shim.address() as AddressInfo).port, path: '/servers/srv_b1' }, (res) => (res.resume(), resolve(res.statusCode ?? 0)))
        .on('error', reject)
        .end(),
    );
    shim.close();
    assert.is(status, 503);

    clock.advance(START_RETRY_MS - 1);
    assert.equal(calls, { load: 1, register: 0 }, 'no try before the back-off');
    clock.advance(1);
    await until('the second try', () => calls.register === 1, 5000);
    assert.is(c.port, 0);
    clock.advance(2 * START_RETRY_MS - 1);
    assert.equal(calls, { load: 2, register: 1 }, 'the back-off doubled');
    clock.advance(1);
    await until('the channel listens', () => c.port > 0, 5000);
    assert.equal(calls, { load: 2, register: 2 });
    assert.is(registered.get('host-a') !== undefined, true);

    // a registered peer opens a session to it
    const peers = new Peers({ identity: () => other, connectTimeoutMs: 2000, log, clock: new ManualClock() });
    try {
      const s = await peers.session('host-a', `127.0.0.1:${c.port}`);
      assert.ok(!s.destroyed);
    } finally {
      peers.close();
    }
    clock.advance(120_000);
    assert.equal(calls, { load: 2, register: 2 }, 'no try once up');
  } finally {
    await c.stop();
  }
});

test.run();
