// Per-connection caps against a real runc container: one SSH connection may hold only so many
// open channels and run only so many commands (each one a `runc exec` on the host), and is told
// why when it asks for more: ssh2's client sees the channel open failure's description, OpenSSH
// prints it for a refused `-L` forward, and a command over the limit gets a line on stderr and
// exit status 1; a server runs only so many commands over all its connections. Slots come back
// when channels close and commands end.

import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import ssh2 from 'ssh2';
import type { ClientChannel } from 'ssh2';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { until } from '../helpers/wait.js';
import { addServer, sshArgs, startSshDaemon, type SshTestDaemon, type TestServer } from './helpers/env.js';

/** Accepts connections on `port` and holds them open. */
const holdPy = (port: number) => `import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", ${port}))
s.listen(64)
print("up", flush=True)
held = []
while True:
    held.append(s.accept())
`;

let d: SshTestDaemon;
let A: TestServer;
let B: TestServer;
const clients: ssh2.Client[] = [];
const children: ChildProcess[] = [];
const sockets: Socket[] = [];

function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([p, new Promise<T>((_, reject) => (t = setTimeout(() => reject(new Error(`${what}: no result in ${ms} ms`)), ms)))]).finally(() =>
    clearTimeout(t),
  );
}

test.before(async () => {
  d = await startSshDaemon({ ssh: { maxChannels: 3, maxExecs: 2, maxExecsPerServer: 3 } });
  A = await addServer(d, 'caps-box', {}, true);
  B = await addServer(d, 'caps-two', {}, true);
});

test.after(async () => {
  for (const s of sockets) s.destroy();
  for (const c of clients) c.end();
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await d?.stop();
});

function login(s: TestServer = A): Promise<ssh2.Client> {
  return within(
    30_000,
    'login',
    new Promise((resolve, reject) => {
      const c = new ssh2.Client();
      clients.push(c);
      c.on('error', reject);
      c.on('ready', () => resolve(c));
      c.connect({ host: '127.0.0.1', port: d.port, username: 'root', privateKey: readFileSync(s.keyFile), readyTimeout: 20_000 });
    }),
  );
}

interface Cmd {
  ch: ClientChannel;
  out: string;
  err: string;
  exit: Promise<number | null>;
}

/** Runs `command`; resolves once stdout matched `ready` (or the command ended). */
function exec(c: ssh2.Client, command: string, ready = /[\s\S]/): Promise<Cmd> {
  return within(
    60_000,
    `exec ${command.slice(0, 30)}`,
    new Promise((resolve, reject) => {
      c.exec(command, (err, ch) => {
        if (err) return reject(err);
        const cmd: Cmd = { ch, out: '', err: '', exit: new Promise((r) => ch.on('exit', (code: number | null) => r(code))) };
        let done = false;
        const check = () => {
          if (!done && ready.test(cmd.out)) {
            done = true;
            resolve(cmd);
          }
        };
        ch.on('data', (b: Buffer) => ((cmd.out += b), check()));
        ch.stderr.on('data', (b: Buffer) => (cmd.err += b));
        ch.on('close', () => {
          if (!done) {
            done = true;
            resolve(cmd);
          }
        });
      });
    }),
  );
}

const forward = (c: ssh2.Client) =>
  within(
    30_000,
    'forwardOut',
    new Promise<ClientChannel>((resolve, reject) => c.forwardOut('127.0.0.1', 0, 'localhost', 7000, (err, ch) => (err ? reject(err) : resolve(ch)))),
  );

const refusal = <T>(p: Promise<T>) =>
  p.then(
    () => 'opened',
    (e: Error) => e.message,
  );

test('one connection holds at most 3 channels and runs at most 2 commands, is told why, and gets its slots back', async () => {
  const c = await login();
  const holder = await exec(c, `python3 -c '${holdPy(7000)}'`, /up/);
  const sleeper = await exec(c, 'echo up; exec sleep 120', /up/);
  assert.ok(holder.out.includes('up') && sleeper.out.includes('up'), `${holder.err} ${sleeper.err}`);

  const third = await exec(c, 'echo ran');
  assert.is(await third.exit, 1);
  assert.is(third.out, '');
  assert.match(third.err, /rootbox: too many commands running on this connection \(limit 2\)/);

  const fwd = await forward(c);
  assert.match(await refusal(forward(c)), /too many open channels on this connection \(limit 3\)/);
  assert.match(await refusal(exec(c, 'true')), /too many open channels on this connection \(limit 3\)/);
  assert.ok(d.logs.some((l) => l.msg === 'ssh channel refused' && l.limit === 3));

  // A closed channel frees its slot.
  fwd.close();
  const again = await until('a slot for a forward', async () => (await refusal(forward(c))) === 'opened', 10_000, 50);
  assert.is(again, true);

  // A command's slot comes back when its process is gone (the channel closing hangs it up).
  sleeper.ch.close();
  assert.is(await (await eventually(c, 'echo ran', 'ran\n')).exit, 0);
});

/** Retries `command` until it prints `want` (a slot it waits for is freed asynchronously). */
async function eventually(c: ssh2.Client, command: string, want: string): Promise<Cmd> {
  return until(
    `${command} to run`,
    async () => {
      const r = await exec(c, command);
      return r.out === want && r;
    },
    20_000,
    50,
  );
}

test('a server runs at most 3 commands over all its connections, and says so', async () => {
  const one = await login(B);
  const two = await login(B);
  const first = await exec(one, 'echo up; exec sleep 120', /up/);
  await exec(one, 'echo up; exec sleep 120', /up/);
  await exec(two, 'echo up; exec sleep 120', /up/);
  const fourth = await exec(two, 'echo ran');
  assert.is(await fourth.exit, 1);
  assert.is(fourth.out, '');
  assert.match(fourth.err, /rootbox: too many commands running on this server \(limit 3, over all connections\)/);
  // Another server is not affected.
  const other = await login(A);
  assert.is((await exec(other, 'echo ran')).out, 'ran\n');
  first.ch.close();
  assert.is(await (await eventually(two, 'echo ran', 'ran\n')).exit, 0);
});

test('OpenSSH prints the reason when a -L forward is over the channel cap', async () => {
  // Something in the server accepts and holds connections on port 7001 (on another connection).
  const side = await login();
  await exec(side, `python3 -c '${holdPy(7001)}'`, /up/);
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const lport = (probe.address() as AddressInfo).port;
  await new Promise((r) => probe.close(r));
  const ssh = spawn('ssh', ['-N', '-L', `127.0.0.1:${lport}:localhost:7001`, ...sshArgs(d.port, A.keyFile)], { stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(ssh);
  let stderr = '';
  ssh.stderr!.on('data', (b) => (stderr += b));
  // Wait for the local listener, then open 4 tunnels through one connection whose cap is 3.
  await until(
    'ssh -L listening',
    () =>
      new Promise<boolean>((r) => {
        const s = connect(lport, '127.0.0.1');
        s.on('connect', () => (sockets.push(s), r(true)));
        s.on('error', () => r(false));
      }),
    20_000,
    50,
  );
  for (let i = 0; i < 3; i++) {
    const s = connect(lport, '127.0.0.1');
    s.on('error', () => {});
    sockets.push(s);
    await new Promise((r) => s.once('connect', r).once('error', r)); // one at a time: ssh opens their channels in order
  }
  await until(
    'the refusal on stderr',
    () => /open failed: resource shortage: rootbox: too many open channels on this connection \(limit 3\)/.test(stderr),
    10_000,
    50,
  );
  ssh.kill('SIGTERM');
});

test.run();
