// bench/runtime/loopmount: what mounting a server's disk under our own device name costs (the
// mount helper's `loop`: LOOP_CONFIGURE with autoclear, a symlink `disk` -> /dev/loopN in a scratch
// dir, mount(2) through it; runtime/helper.ts) beside util-linux's `mount -o loop` (which names the
// mount /dev/loopN), alternating on the same ext4 image in one run; each mount is followed by its
// umount (timed too: both free the loop device there). Checks that no loop device is left.
// Usage: node --import tsx bench/runtime/loopmount.ts [n]
import { execFileSync } from 'node:child_process';
import { closeSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { helperPath } from '../../src/runtime/helper.js';

const N = Number(process.argv[2] ?? '50');
const dir = mkdtempSync(join(tmpdir(), 'rbx-loopbench-'));
const img = join(dir, 'disk.img');
const target = join(dir, 'disk');
const helper = helperPath();
const source = () =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .find((l) => l.split(' ')[4] === target)
    ?.split(' - ')[1]
    ?.split(' ')[1];
try {
  const fd = openSync(img, 'wx', 0o600);
  ftruncateSync(fd, 1024 * 1024 * 1024);
  closeSync(fd);
  execFileSync('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', 'lazy_itable_init=1,lazy_journal_init=1', img]);
  mkdirSync(target);
  const ways: Record<string, () => void> = {
    'helper loop (source `disk`)': () => execFileSync(helper, ['loop', img, target, 'disk'], { cwd: dir }),
    'mount -o loop (source /dev/loopN)': () => execFileSync('mount', ['-o', 'loop,nosuid,nodev,noatime', img, target]),
  };
  const mount: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
  const umount: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
  const sources: Record<string, Set<string>> = Object.fromEntries(Object.keys(ways).map((k) => [k, new Set<string>()]));
  for (let i = 0; i < N; i++) {
    for (const label of i % 2 ? Object.keys(ways).reverse() : Object.keys(ways)) {
      let t0 = performance.now();
      ways[label]();
      mount[label].push(performance.now() - t0);
      sources[label].add(source() ?? '(none)');
      t0 = performance.now();
      execFileSync('umount', [target]);
      umount[label].push(performance.now() - t0);
    }
  }
  const left = execFileSync('losetup', ['-n', '-O', 'NAME', '-j', img]).toString().trim();
  const p = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))];
  const base = p(mount['mount -o loop (source /dev/loopN)'], 0.5);
  for (const label of Object.keys(ways))
    console.log(
      `${label.padEnd(34)} mount p50 ${p(mount[label], 0.5).toFixed(1)} ms  p90 ${p(mount[label], 0.9).toFixed(1)} ms  ratio ${(p(mount[label], 0.5) / base).toFixed(2)}  umount p50 ${p(umount[label], 0.5).toFixed(1)} ms  sources: ${[...sources[label]].join(' ')}  (n=${mount[label].length})`,
    );
  console.log(`loop devices left on the image: ${left || 'none'}`);
} finally {
  try {
    execFileSync('umount', [target], { stdio: 'ignore' });
  } catch {
    // not mounted
  }
  rmSync(dir, { recursive: true, force: true });
}
