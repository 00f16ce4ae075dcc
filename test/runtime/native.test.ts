// The runtime's C helpers are real .c files built by `npm run build` (scripts/native.mjs) into
// dist/bin under the hash of their source, and the runtime only ever uses the binary of the
// current source. Driven with the real build script and cc on a copy of the checkout's sources.
// Needs no root.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { appendFileSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { AppError } from '../../src/errors.js';
import { ensureExecWrapper } from '../../src/runtime/execwrap.js';
import { helperPath } from '../../src/runtime/helper.js';
import { checkoutRoot, nativeBinary } from '../../src/runtime/native.js';
import { run } from '../helpers/run.js';

const root = checkoutRoot();
const tmp = mkdtempSync(join(tmpdir(), 'rbx-native-'));
let n = 0;

/** A fresh fake checkout holding a copy of the native sources (nothing built). */
function checkout(): string {
  const dir = join(tmp, `c${n++}`);
  const src = join(dir, 'src', 'runtime', 'native');
  mkdirSync(src, { recursive: true });
  for (const f of readdirSync(join(root, 'src', 'runtime', 'native'))) copyFileSync(join(root, 'src', 'runtime', 'native', f), join(src, f));
  return dir;
}
const build = (dir: string) => run(process.execPath, [join(root, 'scripts', 'native.mjs'), dir], { timeoutMs: 120_000 });
const built = (out: string) =>
  out
    .split('\n')
    .filter((l) => l.startsWith('built '))
    .map((l) => basename(l.slice(6)));

test.after(() => rmSync(tmp, { recursive: true, force: true }));

test('the checkout is found from src/ and both helpers are built where the runtime looks', async () => {
  assert.ok(existsSync(join(root, 'package.json')), root);
  for (const name of ['rbx-idmount', 'rbx-exec'] as const) {
    const b = nativeBinary(name);
    assert.is(b.path.startsWith(join(root, 'dist', 'bin', `${name}-`)), true, b.path);
    assert.ok(b.built, `${b.path} missing: run npm run build`);
  }
  const doctor = await run(join(root, 'bin', 'rootbox'), ['doctor']);
  assert.match(doctor.stdout, new RegExp(`ok\\s+idmapped-mount helper\\s+${nativeBinary('rbx-idmount').path}`));
  assert.match(doctor.stdout, new RegExp(`ok\\s+exec wrapper\\s+${nativeBinary('rbx-exec').path}`));
});

test('a missing helper is refused with the command that builds it', () => {
  const dir = checkout();
  try {
    helperPath(dir);
    assert.unreachable('helperPath returned without a binary');
  } catch (e) {
    assert.instance(e, AppError);
    assert.is((e as AppError).code, 'helper_missing');
    assert.match(
      (e as Error).message,
      /dist\/bin\/rbx-idmount-[0-9a-f]{12} \(built from src\/runtime\/native\/rbx-idmount\.c\) is missing; run `npm run build` in /,
    );
  }
});

test('an edited source is never served by the binary of the old one, and the build compiles only what changed', async () => {
  const dir = checkout();
  const first = await build(dir);
  assert.is(first.code, 0, first.stderr);
  assert.equal(
    built(first.stdout)
      .map((b) => b.replace(/-[0-9a-f]{12}$/, ''))
      .sort(),
    ['rbx-exec', 'rbx-freeze', 'rbx-idmount', 'rbx-lock'],
  );
  const old = helperPath(dir);
  const usage = await run(old, []);
  assert.is(usage.code, 2);
  assert.match(usage.stderr, /usage: rbx-idmount/);

  const again = await build(dir);
  assert.is(again.code, 0, again.stderr);
  assert.equal(built(again.stdout), [], 'an unchanged source is not compiled again');

  appendFileSync(join(dir, 'src', 'runtime', 'native', 'rbx-idmount.c'), '/* edited */\n');
  assert.throws(() => helperPath(dir), /rbx-idmount-[0-9a-f]{12} .* is missing; run `npm run build`/);
  const third = await build(dir);
  assert.is(third.code, 0, third.stderr);
  assert.equal(built(third.stdout), [basename(nativeBinary('rbx-idmount', dir).path)]);
  assert.is.not(helperPath(dir), old);
});

test('the exec wrapper is put into the init directory under its hashed name, replacing an older build', async () => {
  const dir = checkout();
  const init = join(tmp, `init${n++}`);
  mkdirSync(init);
  writeFileSync(join(init, 'rbx-exec-000000000000'), 'old build');
  const errors: Error[] = [];
  assert.is(
    ensureExecWrapper(init, (e) => errors.push(e), dir),
    undefined,
    'nothing to install before the build',
  );
  assert.match(errors[0]?.message ?? '', /the exec wrapper is not built: dist\/bin\/rbx-exec-[0-9a-f]{12} .* run `npm run build`/);

  assert.is((await build(dir)).code, 0);
  const host = ensureExecWrapper(init, (e) => errors.push(e), dir);
  assert.is(host, join(init, basename(nativeBinary('rbx-exec', dir).path)));
  assert.is(errors.length, 1, errors.map((e) => e.message).join('\n'));
  assert.equal(readdirSync(init), [basename(host!)]);
  assert.is(statSync(host!).mode & 0o777, 0o755);
  const r = await run(host!, ['run', 'sh', '-c', 'kill -TERM $$']);
  assert.is(r.code, 128 + 15);
});

test("a source that does not compile fails the build with the compiler's message and leaves no binary", async () => {
  const dir = checkout();
  writeFileSync(join(dir, 'src', 'runtime', 'native', 'broken.c'), 'int main(void) { return nope; }\n');
  const r = await build(dir);
  assert.is(r.code, 1);
  assert.match(r.stderr, /cannot compile src\/runtime\/native\/broken\.c: .*nope/s);
  assert.ok(!readdirSync(join(dir, 'dist', 'bin')).some((f) => f.startsWith('broken') || f.endsWith('.tmp')), readdirSync(join(dir, 'dist', 'bin')).join(' '));
});

test.run();
