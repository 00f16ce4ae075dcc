// The store's settlement journal (src/store/settling.ts) stays small however many settlements
// overlap: a rewrite keeps only the payments still locked in lmdb, a kill between two writes
// leaves a whole file, and what it keeps is read back as written.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SettlingJournal } from '../../src/store/settling.js';

const key = (i: number): [string, string, string] => ['0xasset', '0xpayer', `0x${i.toString(16).padStart(64, '0')}`];

test('a rewrite keeps only the payments not yet resolved, even when some always are in flight', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-journal-'));
  const file = join(dir, 'settling.journal');
  const j = new SettlingJournal<{ status: string }>(file);
  try {
    const open = new Set<number>([0]); // one settlement whose lmdb commit never lands in this test
    for (let i = 1; i <= 200; i++) {
      j.compact((k) => !open.has(Number.parseInt(k[2], 16)));
      j.append({ key: key(i), change: { status: 'pending' } });
      if (i === 1) j.append({ key: key(0), change: { status: 'pending' } });
      if (i % 7 === 0) open.add(i); // and some overlapping ones, resolved a little later
      if (i % 7 === 3 && i > 3) open.delete(i - 3);
    }
    assert.ok(j.size < 40, `the journal names ${j.size} payments`);
    const kept = j.read().map((e) => Number.parseInt(e.key[2], 16));
    assert.ok(kept.includes(0), 'the payment still in flight is kept');
    assert.is(kept.length, j.size);
    assert.ok(readFileSync(file, 'utf8').split('\n').length < 42);
    j.clear();
    assert.equal(j.read(), []);
  } finally {
    j.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
