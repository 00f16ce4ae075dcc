// POST /servers/{id}/exec on a real daemon with real runc servers and real clients: the JSON
// answer (uname, a non-zero exit, stdin, output over the bound), a timeout that kills the whole
// process group (checked with ps over OpenSSH), NDJSON streaming and a client leaving mid-stream
// (its command killed), waking a sleeping server and thawing a dozing one, and the caps of
// commands per server (shared with SSH) and per account.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { until } from '../helpers/wait.js';
import { send } from '../http/contract.js';
import { CLIENT_OPTS } from '../ssh/helpers/env.js';

const IDLE = 1500;
let d: TestDaemon;
let rt: ContainerRuntime;
let id = '';
let id2 = '';
let key = '';
let slug = '';
const work = mkdtempSync(join(tmpdir(), 'rbx-exec-'));
const keyFile = join(work, 'key');

test.before(async () => {
  d = await startTestDaemon({
    hosting: { rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000 }, exec: { maxPerAccount: 3, killGrace: '1s' } },
    ssh: { maxExecsPerServer: 2 },
    proxy: { idleTimeout: IDLE, idleCheckInterval: 200, dozeTimeout: '1h', dozeMemoryFloor: 0, wakeTimeout: '20s' },
  });
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  rt = d.daemon.runtime;
  const created = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(created.status, 200, created.text);
  ({ id, api_key: key } = created.json);
  slug = String(created.json.subdomain).split('.')[0];
  writeFileSync(keyFile, created.json.ssh_private_key, { mode: 0o600 });
  const second = await send(d.http, 'api.localhost', 'POST', '/create', { headers: { authorization: `Bearer ${key}` } });
  assert.is(second.status, 200, second.text);
  id2 = second.json.id;
});
test.after(async () => {
  await d?.stop();
  rmSync(work, { recursive: true, force: true });
});

const auth = () => ({ authorization: `Bearer ${key}` });
const exec = (body: unknown, server = id) => send(d.http, 'api.localhost', 'POST', `/servers/${server}/exec`, { headers: auth(), body });
const ssh = (command: string) => run('ssh', ['-p', String(d.daemon.ssh.port), '-i', keyFile, ...CLIENT_OPTS, 'root@127.0.0.1', command], { timeoutMs: 30_000 });
/** Whether a process whose command line has `mark` runs in the server (ps run by the runtime itself, outside the command slots). */
async function runningInServer(mark: string): Promise<boolean> {
  const k = rt.exec(id, { argv: ['ps', '-eo', 'args='] });
  k.stdin.end();
  let out = '';
  k.stdout.on('data', (c: Buffer) => (out += c));
  k.stderr.resume();
  await k.exited;
  return out.split('\n').some((l) => l.includes(mark) && !l.includes('ps -eo'));
}
/** Processes inside the server whose command line has `mark`, as ps over OpenSSH lists them. */
async function processesWith(mark: string): Promise<string[]> {
  const r = await ssh('ps -eo args=');
  assert.is(r.code, 0, r.stderr);
  return r.stdout.split('\n').filter((l) => l.includes(mark) && !l.includes('ps -eo'));
}

/** A streamed exec: the response, its lines as they come, and the request to abort. */
function streamed(
  body: unknown,
  server = id,
): Promise<{ res: IncomingMessage; lines: Record<string, unknown>[]; next(): Promise<Record<string, unknown>>; destroy(): void }> {
  const raw = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: d.http,
        method: 'POST',
        path: `/servers/${server}/exec`,
        agent: false,
        headers: {
          host: 'api.localhost',
          ...auth(),
          accept: 'application/x-ndjson',
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(raw)),
        },
      },
      (res) => {
        if (res.statusCode !== 200) return reject(new Error(`exec answered ${res.statusCode}`));
        const lines: Record<string, unknown>[] = [];
        let buf = '';
        const waiters: (() => void)[] = [];
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          buf += c;
          let nl: number;
          while ((nl = buf.indexOf('\n')) >= 0) {
            lines.push(JSON.parse(buf.slice(0, nl)));
            buf = buf.slice(nl + 1);
          }
          for (const w of waiters.splice(0)) w();
        });
        let taken = 0;
        /** The next line, as soon as it is read; an error when none comes within 30 s. */
        const next = async () => {
          if (lines.length <= taken)
            await new Promise<void>((resolve, reject) => {
              const deadline = setTimeout(() => reject(new Error(`no line ${taken} within 30 s; got ${JSON.stringify(lines)}`)), 30_000);
              const check = () => {
                if (lines.length <= taken) return void waiters.push(check);
                clearTimeout(deadline);
                resolve();
              };
              waiters.push(check);
            });
          return lines[taken++];
        };
        resolve({ res, lines, next, destroy: () => req.destroy() });
      },
    );
    req.on('error', reject);
    req.end(raw);
  });
}

test('uname -a answers exit 0 and the kernel line; the hostname is the server slug', async () => {
  const r = await exec({ command: 'uname -a; hostname' });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.exit_code, 0);
  assert.match(r.json.stdout, /^Linux /);
  assert.ok(r.json.stdout.includes(slug), r.json.stdout);
  assert.is(r.json.truncated, false);
  assert.ok(Number.isInteger(r.json.ms));
});

test('a non-zero exit, stderr and an argv command in a cwd with env', async () => {
  const r = await exec({ command: 'echo oops >&2; exit 7' });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.exit_code, 7);
  assert.is(r.json.stderr, 'oops\n');
  const a = await exec({ command: ['sh', '-c', 'pwd; echo "$GREETING"'], cwd: '/tmp', env: { GREETING: 'hi there' } });
  assert.is(a.json.stdout, '/tmp\nhi there\n');
  const bad = await exec({ command: 'true', timeout: 100_000 });
  assert.is(bad.status, 400, bad.text);
});

test('stdin reaches the command', async () => {
  const r = await exec({ command: ['wc', '-c'], stdin: 'hello world' });
  assert.is(r.json.stdout.trim(), '11');
  const c = await exec({ command: 'tr a-z A-Z', stdin: 'shout\n' });
  assert.is(c.json.stdout, 'SHOUT\n');
});

test('5 MB of output is cut at 1 MiB and truncated says so; the exit status still comes', async () => {
  const r = await exec({ command: "head -c 5000000 /dev/zero | tr '\\0' a; echo done >&2" });
  assert.is(r.status, 200);
  assert.is(r.json.stdout.length, 1024 * 1024);
  assert.is(r.json.truncated, true);
  assert.is(r.json.stderr, 'done\n');
  assert.is(r.json.exit_code, 0);
});

test('a timeout kills the whole process group: no process is left (ps over SSH)', async () => {
  const r = await exec({ command: 'sleep 3001 & sleep 3002 & sleep 3003; echo never', timeout: 1 });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.timed_out, true);
  assert.not.ok(r.json.stdout.includes('never'));
  assert.ok(r.json.ms >= 1000 && r.json.ms < 10_000, `${r.json.ms} ms`);
  assert.equal(await processesWith('sleep 300'), []);
});

test('NDJSON streams output as it comes and ends with the exit line', async () => {
  const s = await streamed({ command: 'echo first; read x; echo second >&2; exit 3', stdin: 'go\n' });
  assert.is(s.res.statusCode, 200);
  assert.match(String(s.res.headers['content-type']), /application\/x-ndjson/);
  // each stream in order as the command wrote it; between the two pipes no order is promised
  const got = [await s.next(), await s.next()];
  assert.equal(
    got.filter((l) => l.stream === 'stdout'),
    [{ stream: 'stdout', data: 'first\n' }],
  );
  assert.equal(
    got.filter((l) => l.stream === 'stderr'),
    [{ stream: 'stderr', data: 'second\n' }],
  );
  const last = await s.next();
  assert.is(last.exit_code, 3);
  assert.is(last.timed_out, false);
});

test('a streaming client that disconnects mid-stream gets its command killed', async () => {
  const s = await streamed({ command: 'echo started; sleep 4001 & sleep 4002; echo never', timeout: 120 });
  assert.equal(await s.next(), { stream: 'stdout', data: 'started\n' });
  assert.ok((await processesWith('sleep 400')).length >= 1, 'the command runs');
  s.destroy();
  await until('the command is gone', async () => (await processesWith('sleep 400')).length === 0, 15_000, 200);
});

test('exec wakes a sleeping server and thaws a dozing one', async () => {
  assert.is((await exec({ command: 'true' })).status, 200);
  await rt.stop(id);
  assert.is(rt.get(id)?.state, 'sleeping');
  const r = await exec({ command: 'echo awake' });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.stdout, 'awake\n');
  assert.is(rt.get(id)?.state, 'running');
  const presence = d.daemon.presence;
  await until('the server dozes', () => presence.isDozing(id), IDLE + 15_000, 100);
  assert.is((await rt.runc.state(id))?.status, 'paused');
  const starts = presence.starts;
  const t = await exec({ command: 'echo thawed' });
  assert.is(t.json.stdout, 'thawed\n');
  assert.is(presence.starts, starts, 'thawed, not started');
  assert.not.ok(presence.isDozing(id));
});

test('commands per server are shared with SSH and capped; commands per account are capped: 429 too_many_commands', async () => {
  const a1 = await streamed({ command: 'echo a1; sleep 5001', timeout: 60 });
  await a1.next();
  const sshHeld = run('ssh', ['-p', String(d.daemon.ssh.port), '-i', keyFile, ...CLIENT_OPTS, 'root@127.0.0.1', 'echo s; sleep 5002'], { timeoutMs: 60_000 });
  // seen by a ps the runtime runs directly, which takes no command slot: a poll through the API
  // would take the second slot itself and could be what makes the SSH command be refused
  await until('the SSH command runs', () => runningInServer('sleep 5002'), 45_000, 100);
  const r = await exec({ command: 'true' });
  assert.is(r.status, 429, r.text);
  assert.is(r.json.error, 'too_many_commands');
  assert.match(r.json.detail, /this server/);
  const viaSsh = await ssh('echo third');
  assert.is(viaSsh.code, 1, 'SSH is refused too while the server holds its maximum');
  assert.match(viaSsh.stderr, /too many commands running on this server/);
  const b1 = await streamed({ command: 'echo b1; sleep 5003', timeout: 60 }, id2);
  await b1.next();
  const b2 = await streamed({ command: 'echo b2; sleep 5004', timeout: 60 }, id2);
  await b2.next();
  const over = await exec({ command: 'true' }, id2);
  assert.is(over.status, 429, over.text);
  assert.is(over.json.error, 'too_many_commands');
  assert.match(over.json.detail, /account/);
  for (const s of [a1, b1, b2]) s.destroy();
  const k = rt.exec(id, { argv: ['pkill', '-f', 'sleep 5002'] });
  k.stdin.end();
  await k.exited;
  await sshHeld;
  await until('slots are free again', async () => (await exec({ command: 'true' }, id2)).status === 200, 15_000, 200);
});

test.run();
