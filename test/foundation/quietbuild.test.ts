// `rootbox image build --log FILE` (src/ops/imagecli.ts quietBuild): a person sees one line per
// step and a progress line every 10 s; the tools' thousands of lines are kept in FILE.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { quietBuild } from '../../src/ops/imagecli.js';

test("a build's steps are printed, its tools' output is kept in the log and counted in progress lines", () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-quiet-'));
  try {
    const file = join(dir, 'setup.log');
    const shown: string[] = [];
    let t = 0;
    const q = quietBuild(
      file,
      (s) => shown.push(s),
      () => t,
    );
    q.line('building image bookworm (recipe abc): debootstrap --variant=minbase');
    for (let i = 0; i < 3000; i++) {
      t += 10; // 30 s of output in all
      q.line(i % 3 === 0 ? `  I: Retrieving pkg${i} 1.0` : i % 3 === 1 ? `  Unpacking pkg${i} (1.0) ...` : `  Setting up pkg${i} (1.0) ...`);
    }
    q.line('image bookworm built in 30 s at /x');
    q.close();
    assert.is(shown[0], 'building image bookworm (recipe abc): debootstrap --variant=minbase\n');
    assert.is(shown[shown.length - 1], 'image bookworm built in 30 s at /x\n');
    const progress = shown.slice(1, -1);
    assert.is(progress.length, 3, progress.join(''));
    assert.match(progress[1], /… 2000 lines of output so far: 667 packages retrieved, 667 unpacked, 666 set up \(details in .*setup\.log\)/);
    const kept = readFileSync(file, 'utf8').split('\n').filter(Boolean);
    assert.is(kept.length, 3000);
    assert.is(kept[0], 'I: Retrieving pkg0 1.0');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
