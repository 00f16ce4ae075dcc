// The command line's hints say where the daemon's log is (src/log/where.ts): journalctl only when
// the daemon is the rootbox unit of a running systemd, else the output of `rootbox serve`.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { logWhere, underSystemd } from '../../src/log/index.js';

test('journalctl is named only for the rootbox unit of a running systemd', () => {
  const root = mkdtempSync(join(tmpdir(), 'rbx-logwhere-'));
  try {
    assert.not.ok(underSystemd(root), 'no systemd');
    mkdirSync(join(root, 'run/systemd/system'), { recursive: true });
    assert.not.ok(underSystemd(root), 'systemd, but no rootbox unit');
    mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
    writeFileSync(join(root, 'etc/systemd/system/rootbox.service'), '[Service]\n');
    assert.ok(underSystemd(root));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  assert.is(logWhere('req_1', true), 'journalctl -u rootbox | grep req_1');
  assert.is(logWhere('req_1', false), 'the output of rootbox serve, the line with req_1');
  assert.not.match(logWhere(undefined, false), 'journalctl');
});

test.run();
