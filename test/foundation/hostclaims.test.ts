// What two daemons on one host may not share (src/runtime/locks.ts clashes): the metrics listener
// is an address and a port, so two daemons on different loopback addresses with the same port run
// side by side, and a refusal says which value is ours and which is theirs.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { clashes, sameListen, type HostClaims } from '../../src/runtime/locks.js';

const claims = (o: Partial<HostClaims>): HostClaims => ({
  dataDir: '/var/lib/a',
  bridge: 'rba',
  nftTable: 'rba',
  subnet: '10.90.1.0/24',
  uids: [100_000_000, 100_065_535],
  portPool: '30000-30099',
  metrics: '127.0.0.41:9464',
  ...o,
});
const other = (o: Partial<HostClaims>) =>
  claims({ dataDir: '/var/lib/b', bridge: 'rbb', nftTable: 'rbb', subnet: '10.90.2.0/24', uids: [200_000_000, 200_065_535], portPool: '31000-31099', ...o });

test('the same metrics port on two loopback addresses is no clash', () => {
  assert.equal(clashes(claims({}), other({ metrics: '127.0.0.42:9464' })), []);
  assert.not.ok(sameListen('[::1]:9464', '127.0.0.1:9464'));
});

test('the same metrics address and port, or a wildcard on the same port, clashes: ours and theirs named', () => {
  assert.equal(clashes(claims({}), other({ metrics: '127.0.0.41:9464' })), ['metrics.listen 127.0.0.41:9464 (ours 127.0.0.41:9464, theirs 127.0.0.41:9464)']);
  assert.equal(clashes(claims({}), other({ metrics: '0.0.0.0:9464' })), ['metrics.listen 127.0.0.41:9464 (ours 127.0.0.41:9464, theirs 0.0.0.0:9464)']);
  assert.ok(sameListen('[::]:9464', '127.0.0.1:9464'));
  assert.not.ok(sameListen('off', 'off'));
});

test('overlapping ranges name our value and theirs', () => {
  const what = clashes(claims({}), other({ subnet: '10.90.0.0/16', portPool: '30050-30149', metrics: '127.0.0.42:9464' }));
  assert.equal(what, [
    'runtime.subnet 10.90.1.0/24 (ours 10.90.1.0/24, theirs 10.90.0.0/16)',
    'hosting.portPool 30000-30099 (ours 30000-30099, theirs 30050-30149)',
  ]);
});

test.run();
