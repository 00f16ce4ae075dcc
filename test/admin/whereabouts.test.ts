// Operator commands run outside the daemon's working directory (issue 36 item 8): with no
// --config, ROOTBOX_CONFIG or ROOTBOX_DATA_DIR and no store under ./var, `bin/rootbox status` run
// from another directory finds the data dir of the daemon running on this machine (each daemon
// writes its whereabouts under runDir while its admin socket listens), and says so; with two
// daemons, or none, it refuses and names the flags that choose one. The real CLI (bin/rootbox, a
// separate process) against real daemons.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { announce } from '../../src/admin/whereabouts.js';

const bin = new URL('../../bin/rootbox', import.meta.url).pathname;
const runDir = mkdtempSync(join(tmpdir(), 'rbx-run-'));
const away = mkdtempSync(join(tmpdir(), 'rbx-away-')); // a working dir with no var/ of its own
const daemons: TestDaemon[] = [];

/** bin/rootbox in `away`, with no ROOTBOX_* setting but the run dir (and `env`). */
function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ROOTBOX_')));
  return new Promise((resolve, reject) => {
    const p = spawn(bin, args, { cwd: away, env: { ...clean, ROOTBOX_RUN_DIR: runDir, ...env }, timeout: 60_000 });
    let stdout = '';
    let stderr = '';
    p.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    p.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

test.after(async () => {
  for (const d of daemons) await d.stop().catch(() => {});
  rmSync(runDir, { recursive: true, force: true });
  rmSync(away, { recursive: true, force: true });
});

test("run from another directory, `status` finds the running daemon's data dir and says so", async () => {
  const a = await startTestDaemon({ runDir });
  daemons.push(a);
  assert.is(readdirSync(runDir).length, 1, 'the daemon wrote its whereabouts');
  const r = await cli(['status', '--json']);
  assert.is(r.code, 0, r.stderr);
  const s = JSON.parse(r.stdout) as { data_dir: string; daemon: { running: boolean } };
  assert.is(s.data_dir, a.dataDir);
  assert.ok(s.daemon.running, r.stdout);
  assert.ok(r.stderr.includes(a.dataDir) && r.stderr.includes(`pid ${process.pid}`), r.stderr);
  assert.not.ok(readdirSync(away).length, 'nothing made in the working dir');
});

test('two daemons: it names both and the flags that choose one; a flag chooses', async () => {
  const b = await startTestDaemon({ runDir });
  daemons.push(b);
  const r = await cli(['servers', 'list']);
  assert.is(r.code, 1, r.stdout);
  for (const d of daemons) assert.ok(r.stderr.includes(d.dataDir), r.stderr);
  assert.ok(r.stderr.includes('--config FILE') && r.stderr.includes('ROOTBOX_DATA_DIR='), r.stderr);
  const chosen = await cli(['status', '--json'], { ROOTBOX_DATA_DIR: b.dataDir });
  assert.is(chosen.code, 0, chosen.stderr);
  assert.is(JSON.parse(chosen.stdout).data_dir, b.dataDir);
  // a stopped daemon's whereabouts go with it
  await b.stop();
  daemons.pop();
  assert.is(readdirSync(runDir).length, 1);
});

test('no daemon and no store here: it refuses and names the flags, making nothing', async () => {
  await daemons.pop()!.stop();
  assert.is(readdirSync(runDir).length, 0, 'the whereabouts removed at stop');
  // a killed daemon's file (its process gone) is not taken, and goes
  const dead = spawnSync('true').pid;
  writeFileSync(join(runDir, 'killed.json'), JSON.stringify({ pid: dead, dataDir: '/nowhere', adminSocket: '/nowhere/admin.sock', cwd: '/' }));
  const r = await cli(['status']);
  assert.is(readdirSync(runDir).length, 0, "the killed daemon's whereabouts removed");
  assert.is(r.code, 1, r.stdout);
  assert.ok(r.stderr.includes(join(away, 'var')) && r.stderr.includes('no daemon running'), r.stderr);
  assert.ok(r.stderr.includes('--config FILE') && r.stderr.includes('ROOTBOX_DATA_DIR='), r.stderr);
  assert.not.ok(readdirSync(away).length, 'no store made in the working dir');
});

// Another local user must not steer a root command (or the root daemon's writes) through the
// run dir: a symlink at the temp name, a run dir others may write, a file another user owns.
test('a symlink planted at the temp name is not followed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-run-'));
  const victim = join(away, '..', `rbx-victim-${process.pid}`);
  try {
    const first = announce(dir, { dataDir: '/data/x', adminSocket: '/data/x/admin.sock' });
    assert.ok(first.file, first.error);
    first.remove();
    writeFileSync(victim, 'precious\n');
    symlinkSync(victim, `${first.file}.tmp`);
    const again = announce(dir, { dataDir: '/data/x', adminSocket: '/data/x/admin.sock' });
    assert.is(again.file, first.file, again.error);
    assert.is(readFileSync(victim, 'utf8'), 'precious\n', 'the file the symlink names is left alone');
    assert.ok(lstatSync(again.file!).isFile(), 'the whereabouts are a file of their own');
    assert.is(JSON.parse(readFileSync(again.file!, 'utf8')).dataDir, '/data/x');
    again.remove();
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(victim, { force: true });
  }
});

test('a run dir others may write is refused; a file another uid owns is ignored', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-run-'));
  try {
    // the daemon leaves a world-writable run dir alone, and says why
    chmodSync(dir, 0o777);
    const refused = await startTestDaemon({ runDir: dir });
    daemons.push(refused);
    assert.is(readdirSync(dir).length, 0, 'nothing written into a world-writable run dir');
    assert.ok(
      refused.logs.some((l) => l.level === 'warn' && String(l.detail).includes('writable by its group and others')),
      JSON.stringify(refused.logs.filter((l) => l.level === 'warn')),
    );
    await daemons.pop()!.stop();
    // a daemon's whereabouts written while the dir was safe are not read once others may write it
    chmodSync(dir, 0o700);
    const d = await startTestDaemon({ runDir: dir });
    daemons.push(d);
    const [name] = readdirSync(dir);
    assert.ok(name, 'written into a safe run dir');
    assert.is((await cli(['status', '--json'], { ROOTBOX_RUN_DIR: dir })).code, 0, 'found while the dir is safe');
    chmodSync(dir, 0o777);
    const open = await cli(['status', '--json'], { ROOTBOX_RUN_DIR: dir });
    assert.is(open.code, 1, open.stdout);
    assert.ok(open.stderr.includes(`the run dir ${dir} is not used`) && open.stderr.includes('writable by its group and others'), open.stderr);
    assert.ok(open.stderr.includes('ROOTBOX_DATA_DIR='), open.stderr);
    // a file another user owns (or may write) is not taken, and not removed
    chmodSync(dir, 0o700);
    chownSync(join(dir, name), 65534, 65534);
    const foreign = await cli(['status', '--json'], { ROOTBOX_RUN_DIR: dir });
    assert.is(foreign.code, 1, foreign.stdout);
    assert.ok(foreign.stderr.includes('no daemon running'), foreign.stderr);
    assert.ok(existsSync(join(dir, name)));
    chownSync(join(dir, name), 0, 0);
    chmodSync(join(dir, name), 0o666);
    const writable = await cli(['status', '--json'], { ROOTBOX_RUN_DIR: dir });
    assert.is(writable.code, 1, writable.stdout);
    chmodSync(join(dir, name), 0o644);
    assert.is((await cli(['status', '--json'], { ROOTBOX_RUN_DIR: dir })).code, 0, "found again once it is root's own");
    await daemons.pop()!.stop();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
