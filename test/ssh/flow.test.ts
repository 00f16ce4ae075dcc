// How sessions end and how they hold back, against a real runc container with the OpenSSH
// client: a command killed by a signal reaches the client as exit-signal (pipes and PTY), told
// apart from `exit 143`; on a terminal, signal requests and Ctrl-C reach the command under the
// exec wrapper; a terminal client that stops reading pauses the program instead of
// filling the daemon's memory, and output flows again once it reads; a client that floods a
// terminal with input is held back by the SSH window instead of buffered in the daemon.

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import ssh2 from 'ssh2';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { run } from '../helpers/run.js';
import { addServer, sshArgs, startSshDaemon, type SshTestDaemon, type TestServer } from './helpers/env.js';

let d: SshTestDaemon;
let A: TestServer;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MiB = 1024 * 1024;

const ssh = (command: string, extra: string[] = [], timeoutMs = 60_000) => run('ssh', [...sshArgs(d.port, A.keyFile, extra), command], { timeoutMs });

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 15_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** Host pids of processes of the server whose command line is exactly `args`. */
async function hostPids(args: string): Promise<number[]> {
  const r = await run('pgrep', ['-xf', args]);
  return r.stdout.split('\n').filter(Boolean).map(Number);
}

/** Whether a host process is in the foreground process group of its terminal. */
function foreground(pid: number): boolean {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const [, , pgrp, , , tpgid] = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return pgrp === tpgid;
  } catch {
    return false;
  }
}

/** CPU ticks (utime + stime) a host process has used so far. */
function cpuTicks(pid: number): number {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}

/** The exit status or signal an ssh2 client sees for `command` (optionally on a PTY). */
function ssh2Exit(command: string, pty: boolean): Promise<{ code: number | null; signal?: string }> {
  const c = new ssh2.Client();
  return new Promise<{ code: number | null; signal?: string }>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('ssh2 exec: no exit in 30 s')), 30_000);
    c.on('error', reject);
    c.on('ready', () =>
      c.exec(command, { pty }, (err, ch) => {
        if (err) return reject(err);
        ch.resume();
        ch.stderr.resume();
        ch.on('exit', (code: number | null, signal?: string) => {
          clearTimeout(t);
          resolve({ code, signal });
        });
      }),
    );
    c.connect({ host: '127.0.0.1', port: d.port, username: 'root', privateKey: readFileSync(A.keyFile), readyTimeout: 20_000 });
  }).finally(() => c.end());
}

test.before(async () => {
  try {
    d = await startSshDaemon();
    A = await addServer(d, 'ssh-flow', {}, true);
  } catch (e) {
    console.error('ssh flow suite setup failed:', e);
    throw e;
  }
});

test.after(async () => {
  await d?.stop();
});

test('a command killed by a signal ends with exit-signal, with and without a terminal; exit 143 stays a status', async () => {
  for (const extra of [[], ['-tt']]) {
    const killed = await ssh('kill -TERM $$', ['-v', ...extra]);
    assert.is(killed.code, 255, `${extra}: ${killed.stderr}`);
    assert.match(killed.stderr, /rtype exit-signal/);
    assert.match(killed.stderr, /Exit status -1/);
    const status = await ssh('exit 143', ['-v', ...extra]);
    assert.is(status.code, 143, `${extra}: ${status.stderr}`);
    assert.match(status.stderr, /rtype exit-status/);
    assert.not.match(status.stderr, /rtype exit-signal/);
  }
  // The signal's name as the protocol carries it (OpenSSH 9.2 only logs that one came).
  assert.equal(await ssh2Exit('kill -TERM $$', false), { code: null, signal: 'SIGTERM' });
  assert.equal(await ssh2Exit('kill -KILL $$', true), { code: null, signal: 'SIGKILL' });
  assert.equal(await ssh2Exit('sleep 30 & p=$!; (sleep 0.3; kill -USR1 $p) & wait $p; exit $?', false), { code: 138, signal: undefined });
});

test('on a terminal, a signal request reaches the command and Ctrl-C interrupts the foreground job of a login shell', async () => {
  const c = new ssh2.Client();
  const text = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('pty session: no end in 30 s')), 30_000);
    c.on('error', reject);
    c.on('ready', () =>
      c.exec(`trap 'echo got-term; exit 3' TERM; echo ready; sleep 30 & wait`, { pty: true }, (err, ch) => {
        if (err) return reject(err);
        let out = '';
        ch.on('data', (b: Buffer) => {
          out += b;
          if (/ready\r?\n$/.test(out)) ch.signal('TERM');
        });
        ch.on('exit', (code: number) => (out += ` exit=${code}`));
        ch.on('close', () => {
          c.shell({ term: 'xterm' }, async (err2, sh) => {
            if (err2) return reject(err2);
            let screen = '';
            sh.on('data', (b: Buffer) => (screen += b));
            sh.on('close', () => {
              clearTimeout(t);
              resolve(`${out.trim().replace(/\s+/g, ' ')} | ${/rc=(\d+)/.exec(screen)?.[0]}`);
            });
            try {
              await waitFor('a prompt', () => /# $/.test(screen));
              sh.write('sleep 1007\n');
              // ^C only once the job owns the terminal: typed earlier, it reaches the shell instead
              await waitFor('sleep 1007 as the foreground job', async () => (await hostPids('sleep 1007')).some(foreground));
              sh.write('\x03');
              await waitFor('the prompt after ^C', () => /\^C[\s\S]*# $/.test(screen));
              sh.write('echo "rc=$?"\n');
              await waitFor('the status', () => /rc=\d+[\s\S]*# $/.test(screen));
              sh.write('exit\n');
            } catch (e) {
              reject(new Error(`${(e as Error).message}; screen: ${JSON.stringify(screen.slice(-300))}`));
            }
          });
        });
      }),
    );
    c.connect({ host: '127.0.0.1', port: d.port, username: 'root', privateKey: readFileSync(A.keyFile), readyTimeout: 20_000 });
  }).finally(() => c.end());
  assert.is(text, 'ready got-term exit=3 | rc=130');
});

test('a terminal client that stops reading pauses the program (bounded memory, session kept) and output flows again when it reads', async () => {
  const marker = `rootbox-flood-${process.pid}`;
  const c = spawn('ssh', ['-tt', ...sshArgs(d.port, A.keyFile), `yes ${marker}`], { stdio: ['pipe', 'pipe', 'ignore'] });
  let got = 0;
  c.stdout.on('data', (b: Buffer) => (got += b.length));
  try {
    await waitFor('output from `yes`', () => got > 0, 20_000);
    c.kill('SIGSTOP');
    const [pid] = await waitFor('the yes process on the host', async () => (await hostPids(`yes ${marker}`)).length === 1 && hostPids(`yes ${marker}`));
    await sleep(1500); // windows and buffers fill up, then the terminal is no longer read
    const rss0 = process.memoryUsage().rss;
    const ticks0 = cpuTicks(pid);
    await sleep(2500);
    const ticks = cpuTicks(pid) - ticks0;
    const grew = process.memoryUsage().rss - rss0;
    assert.ok(ticks < 25, `yes kept running while nobody read: ${ticks} ticks of CPU in 2.5 s`);
    assert.ok(grew < 64 * MiB, `the daemon grew by ${(grew / MiB).toFixed(1)} MiB while the client did not read`);
    assert.equal(await hostPids(`yes ${marker}`), [pid], 'the session is still there');
    const before = got;
    c.kill('SIGCONT');
    await waitFor('output to flow again', () => got - before > 8 * MiB, 20_000);
    assert.ok(cpuTicks(pid) > ticks0 + ticks, 'yes runs again');
  } finally {
    c.kill('SIGKILL');
  }
  await waitFor('the flood to be hung up', async () => (await hostPids(`yes ${marker}`)).length === 0, 20_000);
});

test('a client flooding a terminal with input is held back by the SSH window, and the input arrives once the program reads', async () => {
  const c = spawn('ssh', ['-tt', ...sshArgs(d.port, A.keyFile), 'stty raw -echo; sleep 4; head -c 20000000 | wc -c; sleep 2'], {
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  let out = '';
  c.stdout.on('data', (b: Buffer) => (out += b.toString('latin1')));
  const exit = new Promise<number | null>((resolve) => c.on('exit', (code) => resolve(code)));
  let sent = 0;
  let stop = false;
  c.stdin.on('error', () => (stop = true));
  const chunk = Buffer.alloc(64 * 1024, 'x');
  const feed = (async () => {
    while (!stop) {
      if (c.stdin.write(chunk)) sent += chunk.length;
      else {
        sent += chunk.length;
        await new Promise<void>((r) => {
          const go = () => {
            c.stdin.off('drain', go).off('close', go);
            r();
          };
          c.stdin.on('drain', go).on('close', go);
        });
      }
    }
  })();
  try {
    const rss0 = process.memoryUsage().rss;
    await sleep(2000);
    const atTwo = sent;
    await sleep(1000);
    const grew = process.memoryUsage().rss - rss0;
    assert.ok(sent < 32 * MiB, `the client could push ${(sent / MiB).toFixed(1)} MiB into a terminal nobody reads`);
    assert.ok(sent - atTwo < 2 * MiB, `input kept flowing while nobody read: ${((sent - atTwo) / MiB).toFixed(1)} MiB in 1 s`);
    assert.ok(grew < 64 * MiB, `the daemon grew by ${(grew / MiB).toFixed(1)} MiB`);
    // What the terminal echoed before `stty -echo` ran, then wc's count of what head read. (The
    // command lingers after printing: `runc exec -t` can drop the last output of a process that
    // exits while its terminal input is flooded, with or without rootbox's flow control.)
    await waitFor('the count of what head read', () => /20000000/.test(out), 40_000).catch((e) => {
      throw new Error(`${(e as Error).message}: ${JSON.stringify(out.slice(-300))}`);
    });
    assert.match(out, /^x*20000000\r?\n$/, JSON.stringify(out.slice(-300)));
    stop = true;
    c.stdin.end();
    const code = await Promise.race([exit, sleep(20_000).then(() => 'timeout' as const)]);
    assert.is(code, 0, `ssh ended with ${code}`);
  } finally {
    stop = true;
    c.kill('SIGKILL');
    await feed;
  }
});

test.run();
