// The in-container supervisor of /root/run.sh with a real runc server: a new or changed run.sh
// starts within about a second whatever failed before, backoff applies only to the same run.sh
// failing again and again, and a switch stops the whole process group of the old one.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { httpGet, MiB, newId, sh, startRuntime, waitFor, type RuntimeEnv } from './helpers/env.js';

let env: RuntimeEnv;
const id = newId('sup');
let ip = '';

/** A run.sh that serves `text` on :80 with python3's http.server. */
const serving = (text: string, extra = '') => `#!/bin/bash
mkdir -p /tmp/site && echo ${text} > /tmp/site/index.html
${extra}
exec python3 -m http.server 80 --directory /tmp/site
`;
const FAILING = '#!/bin/bash\necho "failing on purpose"\nexit 3\n';

/** Writes run.sh the way an editor does (a new file renamed over the old one), executable. */
async function writeRunSh(text: string): Promise<void> {
  const w = await sh(env.rt, id, 'cat > /root/run.sh.new && chmod +x /root/run.sh.new && mv /root/run.sh.new /root/run.sh', text);
  assert.is(w.code, 0, w.err);
}

const log = async () => (await sh(env.rt, id, 'cat /var/log/run.sh.log')).out;
const count = (text: string, re: RegExp) => (text.match(re) ?? []).length;
const served = async (text: string, ms: number) => waitFor(async () => ((await httpGet(ip, 80, 500))?.trim() === text ? true : null), ms, 50);

test.before(async () => {
  env = await startRuntime('sup', 41, { stopGrace: '5s' }); // a stop that sits out the grace shows
  const s = await env.rt.create({ id, slug: 'sup', memoryBytes: 256 * MiB, diskBytes: 256 * MiB });
  ip = s.ip;
});
test.after(async () => {
  await env?.cleanup();
});

test('the same run.sh failing again and again is restarted with a growing backoff (0.5, 1, 2, 4 s …)', async () => {
  await writeRunSh(FAILING);
  const five = await waitFor(async () => (count(await log(), /exited with status 3/g) >= 5 ? true : null), 20_000, 200);
  assert.ok(five, 'five failures within 20 s');
  const text = await log();
  for (const s of ['0.5', '1.0', '2.0', '4.0']) assert.match(text, new RegExp(`restarting in ${s.replace('.', '\\.')} s`));
});

test('a fixed run.sh after five failures is served within 2 s (the backoff of the failing one is dropped)', async () => {
  const before = await log();
  assert.ok(count(before, /exited with status 3/g) >= 5);
  const t0 = Date.now();
  await writeRunSh(serving('fixed'));
  const ok = await served('fixed', 10_000);
  const took = Date.now() - t0;
  console.log(`   (fixed run.sh after ${count(before, /exited with status 3/g)} failures served after ${took} ms)`);
  assert.ok(ok, 'served at all');
  assert.ok(took <= 2000, `took ${took} ms`);
});

test('an app killed soon after its start is back within about a second', async () => {
  // fails three times first, so the backoff of that run.sh would be 4 s
  await writeRunSh(FAILING);
  assert.ok(await waitFor(async () => (count(await log(), /restarting in 4\.0 s/g) >= 1 ? true : null), 20_000, 200));
  await writeRunSh(serving('again'));
  assert.ok(await served('again', 5000));
  const pid = (await sh(env.rt, id, 'pgrep -f "http[.]server 80"')).out.trim();
  assert.match(pid, /^\d+$/);
  const t0 = Date.now();
  await sh(env.rt, id, `kill -9 ${pid}`);
  const back = await waitFor(
    async () => {
      const now = (await sh(env.rt, id, 'pgrep -f "http[.]server 80"')).out.trim();
      return now && now !== pid && (await httpGet(ip, 80, 500))?.trim() === 'again' ? true : null;
    },
    10_000,
    50,
  );
  const took = Date.now() - t0;
  console.log(`   (killed 1 s after start, served again after ${took} ms)`);
  assert.ok(back);
  assert.ok(took <= 2000, `took ${took} ms`);
});

test("a run.sh changed while its app runs replaces it within 2 s, stopping the old one's whole process group", async () => {
  await writeRunSh(serving('one', 'sleep 1001 &'));
  assert.ok(await served('one', 5000));
  assert.match((await sh(env.rt, id, 'pgrep -f "sleep 100[1]"')).out, /^\d+\n$/);
  const t0 = Date.now();
  await writeRunSh(serving('two'));
  const ok = await served('two', 10_000);
  const took = Date.now() - t0;
  console.log(`   (run.sh changed under a running app: new one served after ${took} ms)`);
  assert.ok(ok);
  assert.ok(took <= 2000, `took ${took} ms`);
  assert.is((await sh(env.rt, id, 'pgrep -f "sleep 100[1]"')).out, '', "the old run.sh's background child is gone too");
  assert.match(await log(), /run\.sh changed: stopping the running one/);
});

test('a touch or chmod of run.sh counts as a change; a run.sh made non-executable stops its app', async () => {
  const pid = (await sh(env.rt, id, 'pgrep -f "http[.]server 80"')).out.trim();
  await sh(env.rt, id, 'touch /root/run.sh');
  const moved = await waitFor(
    async () => {
      const now = (await sh(env.rt, id, 'pgrep -f "http[.]server 80"')).out.trim();
      return now && now !== pid ? now : null;
    },
    5000,
    50,
  );
  assert.ok(moved, 'restarted after touch');
  await sh(env.rt, id, 'chmod -x /root/run.sh');
  const gone = await waitFor(async () => ((await sh(env.rt, id, 'pgrep -f "http[.]server 80"')).out === '' ? true : null), 5000, 50);
  assert.ok(gone, 'stopped after chmod -x');
  assert.is(await httpGet(ip, 80, 500), null);
  await sh(env.rt, id, 'chmod +x /root/run.sh');
  assert.ok(await served('two', 3000), 'back after chmod +x');
});

test('a supervisor watching a running app forks nothing (at most one rotation check per 10 s)', async () => {
  assert.match((await sh(env.rt, id, 'pgrep -f "http[.]server 80"')).out, /^\d+\n$/, 'the app runs');
  // ns_last_pid is the last pid handed out in the server: within this one command, reading it
  // twice and sleeping in between takes 2 pids; a supervisor forking at every 0.5 s check would add 12
  const r = await sh(env.rt, id, 'a=$(< /proc/sys/kernel/ns_last_pid); sleep 6; b=$(< /proc/sys/kernel/ns_last_pid); echo $((b - a))');
  assert.ok(Number(r.out) <= 4, `${r.out.trim()} pids handed out in 6 s`);
});

test('a stop of a server whose app exits on TERM takes well under a second (not the 5 s grace)', async () => {
  await writeRunSh(serving('quick'));
  assert.ok(await served('quick', 5000), 'the app serves');
  const t0 = Date.now();
  await env.rt.stop(id);
  const took = Date.now() - t0;
  console.log(`   (stop of a running run.sh app: ${took} ms)`);
  assert.ok(took < 1000, `the stop took ${took} ms`);
  await env.rt.start(id);
  assert.ok(await served('quick', 5000), 'served again after the start');
});

test('a stop of a server whose app ignores TERM still ends, its app KILLed within the grace', async () => {
  await writeRunSh(serving('deaf', "trap '' TERM"));
  assert.ok(await served('deaf', 5000), 'the app serves');
  const t0 = Date.now();
  await env.rt.stop(id);
  const took = Date.now() - t0;
  console.log(`   (stop of an app ignoring TERM: ${took} ms)`);
  assert.ok(took >= 2500 && took < 7000, `the stop took ${took} ms`);
  await env.rt.start(id);
  assert.ok(await served('deaf', 5000), 'served again after the start');
});

test.run();
