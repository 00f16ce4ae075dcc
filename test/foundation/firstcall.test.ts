// The start-up hint for the generated CA (src/edge/part.ts firstCall): a curl command that works
// as printed from the host — the port the HTTPS listener really got (a port of 0 in the config is
// one the kernel picked), no :443, and --resolve when the listener is bound to an address that
// *.localhost names do not resolve to.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { firstCall } from '../../src/edge/part.js';

const cfg = (host: string, domain = 'localhost') => ({ domain, https: { host, port: 0 } }) as Parameters<typeof firstCall>[0];

test('the hint names the port the listener got, and leaves out 443', () => {
  assert.is(firstCall(cfg('0.0.0.0'), 38443, '/d/tls/ca.pem'), 'curl --cacert /d/tls/ca.pem https://api.localhost:38443/healthz');
  assert.is(firstCall(cfg('0.0.0.0', 'example.com'), 443, '/d/tls/ca.pem'), 'curl --cacert /d/tls/ca.pem https://api.example.com/healthz');
});

test('a listener on another loopback address is reached with --resolve', () => {
  assert.is(firstCall(cfg('127.0.0.41'), 8443, '/ca.pem'), 'curl --cacert /ca.pem --resolve api.localhost:8443:127.0.0.41 https://api.localhost:8443/healthz');
  assert.is(firstCall(cfg('127.0.0.1'), 8443, '/ca.pem'), 'curl --cacert /ca.pem https://api.localhost:8443/healthz');
});

test.run();
