// Automatic checkpoints on a real daemon with a real runc server (issue 37 item 3): a server
// that wrote gets one when it goes to sleep, none when it did not write since; the interval's
// tick (called directly: time injected, not slept) checkpoints a running server that changed and
// only that one; only the newest checkpoints.keep automatic ones stay, manual ones are kept; the
// collector then removes the chunks only the pruned ones held. Manual ones are capped per tier
// (checkpoints.manualPerServer): beyond it POST …/checkpoints and a fork that takes one answer 429.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { send } from '../http/contract.js';
import { until } from '../helpers/wait.js';
import { callAdmin } from '../../src/admin/index.js';

let d: TestDaemon;
let id = '';
let key = '';

test.before(async () => {
  d = await startTestDaemon({
    hosting: { rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000 } },
    proxy: { idleTimeout: 1500, idleCheckInterval: 200, dozeTimeout: 0 },
    checkpoints: { interval: '1h', keep: 2, gcInterval: 0, manualPerServer: { anonymous: 2 } },
  });
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  const created = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(created.status, 200, created.text);
  ({ id, api_key: key } = created.json);
});
test.after(async () => {
  await d?.stop();
});

const api = (method: string, path: string, body?: unknown) =>
  send(d.http, 'api.localhost', method, path, { headers: { authorization: `Bearer ${key}` }, ...(body === undefined ? {} : { body }) });
const list = async () => (await api('GET', `/servers/${id}/checkpoints`)).json.checkpoints as { id: string; kind: string }[];
const exec = async (command: string) => {
  const r = await api('POST', `/servers/${id}/exec`, { command });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.exit_code, 0, r.json.stderr);
};
const auto = () => d.daemon.hosting.core.autoCheckpoints!;
const state = () => d.daemon.presence.state(id);

test('a server that wrote gets an automatic checkpoint when it goes to sleep; one that did not write gets none', async () => {
  await exec('head -c 3000000 /dev/urandom > /root/one && sync');
  await until('the server to sleep', () => state() === 'sleeping', 20_000);
  await until('an automatic checkpoint', async () => (await list()).length === 1, 20_000);
  assert.is((await list())[0].kind, 'auto');
  await auto().tick(); // asleep and unchanged since: nothing
  await auto().enqueue(id);
  assert.is((await list()).length, 1);
});

test('a server the operator stopped after it wrote gets its checkpoint at the next tick, without a wake', async () => {
  await exec('head -c 1000000 /dev/urandom > /root/before-stop && sync');
  const before = (await list()).length;
  const stopped = await callAdmin(d.dataDir, 'POST', `/servers/${id}/stop`);
  assert.is(stopped?.status, 200, JSON.stringify(stopped?.body));
  assert.is.not(state(), 'running');
  await auto().tick();
  const now = await list();
  assert.is(now.length, before + 1, 'one automatic checkpoint of the stopped server');
  assert.is(now[0].kind, 'auto');
  assert.is.not(state(), 'running', 'not woken for it');
  await auto().tick(); // unchanged since: nothing
  assert.is((await list()).length, before + 1);
});

test('the tick checkpoints a running server that changed, keeps the newest `keep` automatic ones and every manual one', async () => {
  const manual = await api('POST', `/servers/${id}/checkpoints`, { comment: 'mine' });
  assert.is(manual.status, 201, manual.text);
  const seen: string[] = [];
  for (let i = 0; i < 3; i++) {
    await exec(`head -c 2000000 /dev/urandom > /root/f${i} && sync`);
    assert.is(state(), 'running');
    await auto().tick();
    const now = await list();
    assert.is(now[0].kind, 'auto', `tick ${i} took one`);
    seen.push(now[0].id);
  }
  const after = await list();
  assert.equal(
    after.filter((c) => c.kind === 'auto').map((c) => c.id),
    [seen[2], seen[1]],
    'the two newest automatic ones',
  );
  assert.ok(
    after.some((c) => c.id === manual.json.id),
    'the manual one stays',
  );
  await auto().tick(); // running, unchanged since the last tick
  assert.is((await list()).length, after.length);
  const r = await d.daemon.checkpoints.collect();
  assert.ok(r.swept);
  assert.ok(r.removed > 0, 'the pruned checkpoints’ own chunks were collected');
  assert.is(auto().backlog(), 0);
});

test('manual checkpoints stop at the tier’s count: 429 checkpoint_limit for another and for a fork that would take one; a deleted one makes room', async () => {
  const manuals = async () => (await list()).filter((c) => c.kind === 'manual');
  assert.is((await manuals()).length, 1, 'the one of the test before');
  const second = await api('POST', `/servers/${id}/checkpoints`, { comment: 'two' });
  assert.is(second.status, 201, second.text);
  const third = await api('POST', `/servers/${id}/checkpoints`, { comment: 'three' });
  assert.is(third.status, 429, third.text);
  assert.is(third.json.error, 'checkpoint_limit');
  assert.match(third.json.detail, /2 manual checkpoints/);
  const fork = await api('POST', `/servers/${id}/fork`, {});
  assert.is(fork.status, 429, fork.text);
  assert.is(fork.json.error, 'checkpoint_limit');
  assert.is((await manuals()).length, 2, 'nothing taken beyond the cap');
  const autos = (await list()).filter((c) => c.kind === 'auto').length;
  assert.ok(autos > 0, 'automatic ones do not count');
  assert.is((await api('DELETE', `/servers/${id}/checkpoints/${second.json.id}`)).status, 200);
  const again = await api('POST', `/servers/${id}/checkpoints`, { comment: 'again' });
  assert.is(again.status, 201, again.text);
});

test.run();
