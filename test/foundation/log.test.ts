import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createLogger } from '../../src/log/index.js';

test('log lines are single JSON objects and secret-looking fields are redacted at any depth', () => {
  const lines: string[] = [];
  const log = createLogger({ sink: (l) => lines.push(l) }).child({ rid: 'r1' });
  log.info('hello', { api_key: 'rbx_secret', nested: { Authorization: 'Bearer x', ok: 1, list: [{ privateKey: 'k' }] }, 'x-payment': 'p' });
  assert.is(lines.length, 1);
  const rec = JSON.parse(lines[0]);
  assert.is(rec.rid, 'r1');
  assert.is(rec.msg, 'hello');
  assert.is(rec.api_key, '[redacted]');
  assert.is(rec.nested.Authorization, '[redacted]');
  assert.is(rec.nested.ok, 1);
  assert.is(rec.nested.list[0].privateKey, '[redacted]');
  assert.is(rec['x-payment'], '[redacted]');
  assert.not.match(lines[0], /rbx_secret|Bearer x/);
});

test('levels below the minimum are dropped and errors keep their stack', () => {
  const lines: string[] = [];
  const log = createLogger({ level: 'warn', sink: (l) => lines.push(l) });
  log.info('quiet');
  log.error('loud', { err: new RangeError('bad') });
  assert.is(lines.length, 1);
  const rec = JSON.parse(lines[0]);
  assert.is(rec.err.name, 'RangeError');
  assert.match(rec.err.stack, /RangeError: bad/);
});

test('a circular field does not crash logging', () => {
  const lines: string[] = [];
  const a: Record<string, unknown> = {};
  a.self = a;
  createLogger({ sink: (l) => lines.push(l) }).info('circular', { a });
  assert.is(lines.length, 1);
  JSON.parse(lines[0]);
});

test.run();
