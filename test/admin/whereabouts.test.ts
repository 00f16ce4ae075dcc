// Operator commands run outside the daemon's working directory (issue 36 item 8): with no
// --config, ROOTBOX_CONFIG or ROOTBOX_DATA_DIR and no store under ./var, `bin/rootbox status` run
// from another directory finds the data dir of the daemon running on this machine (each daemon
// writes its whereabouts under runDir while its admin socket listens), and says so; with two
// daemons, or none, it refuses and names the flags that choose one. The real CLI (bin/rootbox, a
// separate process) against real daemons.
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // no container needed
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

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

test.run();
