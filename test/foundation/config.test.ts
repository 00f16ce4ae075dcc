import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configReference, loadConfig } from '../../src/config/index.js';

const tmp = mkdtempSync(join(tmpdir(), 'rbx-cfg-'));
test.after(() => rmSync(tmp, { recursive: true, force: true }));

const errorOf = (fn: () => unknown): string => {
  try {
    fn();
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('expected an error');
};

test('embedded defaults match the documented fresh-machine values', () => {
  const cfg = loadConfig({ env: {}, cwd: '/srv/x' });
  assert.is(cfg.domain, 'localhost');
  assert.is(cfg.dataDir, '/srv/x/var');
  assert.is(cfg.http.port, 8080);
  assert.is(cfg.https.port, 8443);
  assert.is(cfg.ssh.port, 2222);
  assert.is(cfg.shutdownTimeout, 10_000);
  assert.ok(/^\d+\.\d+\.\d+\.\d+$/.test(cfg.publicIp), cfg.publicIp);
});

test('environment overrides win over the file and are parsed to their types', () => {
  const file = join(tmp, 'a.json');
  writeFileSync(file, JSON.stringify({ domain: 'file.example', https: { port: 9443 } }));
  const cfg = loadConfig({
    env: {
      ROOTBOX_CONFIG: file,
      ROOTBOX_HTTPS_PORT: '10443',
      ROOTBOX_PUBLIC_IP: '203.0.113.7',
      ROOTBOX_LLM_MODELS: 'a, b',
      ROOTBOX_SHUTDOWN_TIMEOUT: '1500ms',
    },
  });
  assert.is(cfg.domain, 'file.example');
  assert.is(cfg.https.port, 10443);
  assert.is(cfg.publicIp, '203.0.113.7');
  assert.equal(cfg.verify.llm.models, ['a', 'b']);
  assert.is(cfg.shutdownTimeout, 1500);
});

test('the loaded config is frozen all the way down', () => {
  const cfg = loadConfig({ env: {} });
  assert.ok(Object.isFrozen(cfg) && Object.isFrozen(cfg.https) && Object.isFrozen(cfg.verify.llm.models));
  assert.throws(() => {
    (cfg.https as { port: number }).port = 1;
  });
});

test('a bad environment value fails with the key, the variable and the rule', () => {
  const msg = errorOf(() => loadConfig({ env: { ROOTBOX_HTTPS_PORT: '70000' } }));
  assert.match(msg, /`https\.port`/);
  assert.match(msg, /ROOTBOX_HTTPS_PORT/);
  assert.match(msg, /65535/);
});

test('a bad file value names the key and the file', () => {
  const file = join(tmp, 'b.json');
  writeFileSync(file, JSON.stringify({ shutdownTimeout: 'soon', domain: 'Not A Domain' }));
  const msg = errorOf(() => loadConfig({ file, env: {} }));
  assert.match(msg, /`shutdownTimeout`.*duration/);
  assert.match(msg, /`domain`/);
  assert.ok(msg.includes(file));
});

test('unknown keys and broken JSON are refused, not ignored', () => {
  const a = join(tmp, 'c.json');
  writeFileSync(a, JSON.stringify({ domian: 'typo.example' }));
  assert.match(
    errorOf(() => loadConfig({ file: a, env: {} })),
    /domian/,
  );
  const b = join(tmp, 'd.json');
  writeFileSync(b, '{ "domain": ');
  assert.match(
    errorOf(() => loadConfig({ file: b, env: {} })),
    /not valid JSON/,
  );
  assert.match(
    errorOf(() => loadConfig({ file: join(tmp, 'missing.json'), env: {} })),
    /cannot read config file/,
  );
});

test('unknown keys nested in any section are refused like top-level ones', () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ https: { prot: 1 } }, /https.*prot|prot.*https/],
    [{ ssh: { loginGrace: '5s' } }, /loginGrace/],
    [{ hosting: { rateLimit: { perIpPerMin: 1 } } }, /perIpPerMin/],
    [{ verify: { x402: { payto: '0x0' } } }, /payto/],
    [{ runtime: { imagedir: '/x' } }, /imagedir/],
    [{ proxy: { idletimeout: '1m' } }, /idletimeout/],
    [{ billing: { grantRam: 1 } }, /grantRam/],
  ];
  for (const [i, [body, re]] of cases.entries()) {
    const f = join(tmp, `nested-${i}.json`);
    writeFileSync(f, JSON.stringify(body));
    assert.match(
      errorOf(() => loadConfig({ file: f, env: {} })),
      re,
      JSON.stringify(body),
    );
  }
});

test('the README configuration reference is exactly what the schema documents', () => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const ref = configReference();
  assert.ok(readme.includes(ref), 'README.md configuration reference is out of date: run `npm run docs`');
  for (const line of ref.split('\n').slice(2)) assert.ok(!/\|\s*\|\s*$/.test(line), `undocumented field: ${line}`);
});

test.run();
