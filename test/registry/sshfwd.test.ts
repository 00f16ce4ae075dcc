// SSH through any host (issue 29 item 4): two daemons on one real PostgreSQL registry, a server
// (a real runc container) created on A, and every OpenSSH client pointed at B's SSH port with
// the server's key. B checks the key against the registry and re-opens the session on A over
// the mutual-TLS channel: an interactive shell with a PTY and a resize, exec with its exit
// status and streams, scp both ways (SFTP and legacy), sftp, rsync, `ssh -L`; a sleeping server
// on A is woken by a login through B; and when A cannot be reached, or is down, the client gets
// a sentence saying so at once instead of a hang.

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as h2connect } from 'node:http2';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { issueIdentity } from '../../src/channel/index.js';
import { RegistryCa, RegistryPool } from '../../src/registry/index.js';
import type { TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { until } from '../helpers/wait.js';
import { CLIENT_OPTS } from '../ssh/helpers/env.js';
import { api, startTwoHosts, type TwoHosts } from './fixtures/twohosts.js';
import { registerMember, testKeys } from '../helpers/cluster.js';

const WEB_PY = `import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80))
s.listen(16)
body = b"hello from A through B\\n"
while True:
    c, _ = s.accept()
    c.recv(65536)
    c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
    c.close()
`;

let hosts: TwoHosts;
let a: TestDaemon;
let b: TestDaemon;
let id: string;
let keyFile: string;
const work = mkdtempSync(join(tmpdir(), 'rbx-sshfwd-'));
const tmuxSession = `rbxsshfwd${process.pid}`;
const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

/** OpenSSH through B's SSH port. */
const via = (d: TestDaemon) => ['-p', String(d.daemon.ssh.port), '-i', keyFile, ...CLIENT_OPTS];
const ssh = (command: string, extra: string[] = [], timeoutMs = 60_000) => run('ssh', [...via(b), ...extra, 'root@127.0.0.1', command], { timeoutMs });
const scpOpts = () => ['-P', String(b.daemon.ssh.port), '-i', keyFile, ...CLIENT_OPTS];

test.before(async () => {
  hosts = await startTwoHosts();
  ({ a, b } = hosts);
  const made = await api(a, 'POST', '/create', { body: { subdomains: ['far'] } });
  assert.is(made.status, 200, made.text);
  id = made.json.id;
  keyFile = join(work, 'far.key');
  writeFileSync(keyFile, made.json.ssh_private_key, { mode: 0o600 });
  assert.ok(a.daemon.runtime.get(id), 'the server runs on A');
  assert.is(b.daemon.runtime.get(id), undefined, 'and not on B');
  assert.is(b.daemon.store.servers.get(id), undefined, "B's store does not have it either");
});

test.after(async () => {
  await run('tmux', ['kill-session', '-t', tmuxSession]).catch(() => {});
  await hosts?.stop();
  rmSync(work, { recursive: true, force: true });
});

test("exec through B runs on A's server: its output, stderr and exit status, and the login is relayed by B", async () => {
  const r = await ssh('echo out; echo err >&2; hostname; whoami; exit 7');
  assert.is(r.code, 7, r.stderr);
  assert.is(r.stdout, 'out\nfar\nroot\n');
  assert.match(r.stderr, /(^|\n)err\n/);
  assert.ok(
    b.logs.some((l) => l.msg === 'ssh login' && l.server === id && l.relayed === true),
    'B logged the relayed login',
  );
  assert.ok(
    a.logs.some((l) => l.msg === 'ssh login' && l.server === id && l.forwarded === true),
    'A logged the forwarded login',
  );
  // a command killed by a signal: the exit-signal request comes back as such (OpenSSH exits 255)
  const killed = await ssh('kill -TERM $$', ['-v']);
  assert.is(killed.code, 255);
  assert.match(killed.stderr, /rtype exit-signal/);
  // stdin reaches the command and EOF ends it: binary-safe both ways
  const data = Buffer.concat([Buffer.from([0, 1, 255, 10, 13, 0]), Buffer.alloc(300_000, 0xab)]);
  const echoed = await new Promise<Buffer>((resolve, reject) => {
    const c = spawn('ssh', [...via(b), 'root@127.0.0.1', 'cat']);
    const out: Buffer[] = [];
    c.stdout.on('data', (x: Buffer) => out.push(x));
    c.on('error', reject);
    c.on('close', () => resolve(Buffer.concat(out)));
    c.stdin.end(data);
  });
  assert.ok(echoed.equals(data), `echoed ${echoed.length} bytes of ${data.length}`);
});

test('an interactive shell through B has a PTY on the server, and a resize reaches it', async () => {
  await run('tmux', ['new-session', '-d', '-s', tmuxSession, '-x', '100', '-y', '30', ['ssh', '-tt', ...via(b), 'root@127.0.0.1'].join(' ')]);
  await run('tmux', ['set-option', '-t', tmuxSession, 'status', 'off']);
  const pane = async () => (await run('tmux', ['capture-pane', '-p', '-t', tmuxSession])).stdout;
  const keys = (text: string) => run('tmux', ['send-keys', '-t', tmuxSession, text, 'Enter']);
  await until('a prompt', async () => /root@far:~# *$/m.test(await pane()), 30_000, 100);
  await keys('echo "tty=$(tty) size=$(stty size)"');
  await until('the terminal answers', async () => /tty=\/dev\/pts\/\d+ size=30 100/.test(await pane()), 15_000, 100);
  await run('tmux', ['resize-window', '-t', tmuxSession, '-x', '120', '-y', '40']);
  // the resize is a window-change request: poll until the shell sees the new size
  await until(
    'the resize to reach the server',
    async () => {
      await keys('echo "resized=$(stty size)"');
      return /resized=40 120/.test(await pane());
    },
    15_000,
    300,
  );
  await keys('exit 0');
  await until('the session to end', async () => (await run('tmux', ['has-session', '-t', tmuxSession])).code !== 0, 15_000, 100);
});

test('scp through B moves 20 MB both ways (SFTP and legacy -O) with matching sha256', async () => {
  const src = join(work, 'big.bin');
  assert.is((await run('sh', ['-c', `head -c 20971520 /dev/urandom > ${src}`])).code, 0);
  const want = sha(src);
  for (const legacy of [[], ['-O']]) {
    const up = await run('scp', [...legacy, ...scpOpts(), src, 'root@127.0.0.1:/root/big.bin'], { timeoutMs: 120_000 });
    assert.is(up.code, 0, up.stderr);
    assert.is((await ssh('sha256sum /root/big.bin')).stdout.split(' ')[0], want);
    const down = join(work, `big.down${legacy.length}`);
    const get = await run('scp', [...legacy, ...scpOpts(), 'root@127.0.0.1:/root/big.bin', down], { timeoutMs: 120_000 });
    assert.is(get.code, 0, get.stderr);
    assert.is(sha(down), want);
    await ssh('rm -f /root/big.bin');
  }
});

test('sftp through B puts, lists, gets and removes', async () => {
  const f = join(work, 'note.txt');
  writeFileSync(f, 'sftp through B\n'.repeat(1000));
  const back = join(work, 'note.back');
  const batch = join(work, 'batch');
  writeFileSync(batch, `put ${f} /root/note.txt\nls -l /root\nget /root/note.txt ${back}\nrm /root/note.txt\n`);
  const r = await run('sftp', ['-b', batch, ...scpOpts(), 'root@127.0.0.1'], { timeoutMs: 60_000 });
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /note\.txt/);
  assert.is(readFileSync(back, 'utf8'), readFileSync(f, 'utf8'));
  assert.is((await ssh('test -e /root/note.txt && echo present || echo gone')).stdout.trim(), 'gone');
});

test('rsync -e ssh through B copies a tree up and back', async () => {
  const tree = join(work, 'tree');
  mkdirSync(join(tree, 'a/b/c'), { recursive: true });
  for (let i = 0; i < 20; i++) writeFileSync(join(tree, `a/${i % 2 ? 'b/' : ''}f${i}.txt`), `file ${i}\n`.repeat(i * 40 + 1));
  writeFileSync(join(tree, 'a/b/c/deep.bin'), Buffer.alloc(200_000, 7));
  symlinkSync('b/c/deep.bin', join(tree, 'a/link'));
  const rsh = ['ssh', ...via(b)].join(' ');
  const up = await run('rsync', ['-a', '-e', rsh, `${tree}/`, 'root@127.0.0.1:/root/tree/'], { timeoutMs: 60_000 });
  assert.is(up.code, 0, up.stderr);
  const listing = 'find . -type f | sort | xargs sha256sum && readlink a/link';
  const local = await run('sh', ['-c', `cd ${tree} && ${listing}`]);
  assert.is((await ssh(`cd /root/tree && ${listing}`)).stdout, local.stdout);
  const back = join(work, 'tree.back');
  const down = await run('rsync', ['-a', '-e', rsh, 'root@127.0.0.1:/root/tree/', `${back}/`], { timeoutMs: 60_000 });
  assert.is(down.code, 0, down.stderr);
  assert.is((await run('sh', ['-c', `cd ${back} && ${listing}`])).stdout, local.stdout);
});

test("ssh -L through B reaches port 80 of A's server; a refused destination says why", async () => {
  writeFileSync(join(work, 'web.py'), WEB_PY);
  const put = await run('scp', [...scpOpts(), join(work, 'web.py'), 'root@127.0.0.1:/root/web.py']);
  assert.is(put.code, 0, put.stderr);
  assert.is((await ssh('(nohup python3 /root/web.py >/dev/null 2>&1 &)')).code, 0);
  const probe = await run('python3', ['-c', 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])']);
  const local = Number(probe.stdout.trim());
  const tunnel = spawn('ssh', ['-N', '-L', `${local}:localhost:80`, ...via(b), 'root@127.0.0.1'], { stdio: 'ignore' });
  try {
    const body = await until(
      'the tunnel',
      async () => {
        const r = await run('curl', ['-sS', '--max-time', '5', `http://127.0.0.1:${local}/`]);
        return r.code === 0 && r.stdout;
      },
      30_000,
      200,
    );
    assert.is(body, 'hello from A through B\n');
  } finally {
    tunnel.kill('SIGTERM');
  }
  const refused = await run('ssh', ['-W', '1.1.1.1:443', ...via(b), 'root@127.0.0.1'], { input: '', timeoutMs: 20_000 });
  assert.is.not(refused.code, 0);
  assert.match(refused.stderr, /administratively prohibited: rootbox forwards only to this server itself/);
  await ssh('pkill -f web.py');
});

test('a login through B wakes the sleeping server on A', async () => {
  await a.daemon.runtime.stop(id);
  assert.is(a.daemon.runtime.get(id)?.state, 'sleeping');
  const r = await ssh('echo awake; hostname');
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout, 'awake\nfar\n');
  assert.is(a.daemon.runtime.get(id)?.state, 'running');
});

test("A's channel takes an SSH stream only from a registered host with its registered key, only for its own server at the placement epoch; no SSH port takes a login without a key", async () => {
  const pool = new RegistryPool({ url: hosts.pg.url, connectTimeoutMs: 1000, statementTimeoutMs: 2000 });
  const pair = (await new RegistryCa(pool, testKeys()).load())!;
  await pool.end();
  const stranger = issueIdentity(pair, 'host-x'); // signed by the cluster CA, never registered
  const member = issueIdentity(pair, 'host-m');
  await registerMember(hosts.pg, member);
  const epoch = Number(await hosts.pg.sql(`SELECT epoch FROM placements WHERE server_id = '${id}'`));
  const port = Number(a.cfg.cluster.listen!.split(':').pop());
  /** The status of an SSH stream to A's channel, and its first bytes when it was taken (status 0: the connection was refused). */
  const open = (server: string, at: number, method = 'CONNECT', as = member) =>
    new Promise<{ status: number; first: string }>((resolve, reject) => {
      const s = h2connect(`https://127.0.0.1:${port}`, { ca: pair.certPem, servername: 'host-a', cert: as.cert, key: as.key });
      s.on('error', () => resolve({ status: 0, first: '' }));
      s.on('close', () => resolve({ status: 0, first: '' }));
      const req = s.request(
        {
          ':method': method,
          ...(method === 'CONNECT' ? {} : { ':path': '/' }),
          ':authority': 'host-a',
          'x-rootbox-kind': 'ssh',
          'x-rootbox-server': server,
          'x-rootbox-epoch': String(at),
          'x-rootbox-hops': '1',
        },
        { endStream: false },
      );
      let status = 0;
      req.on('response', (h) => {
        status = Number(h[':status']);
        if (status !== 200) (s.close(), resolve({ status, first: '' }));
      });
      req.once('data', (x: Buffer) => (s.destroy(), resolve({ status, first: x.toString() })));
      req.on('error', reject);
    });
  assert.equal(await open(id, epoch, 'CONNECT', stranger), { status: 0, first: '' }, 'an unregistered name (host-x) is refused before any stream');
  assert.equal(
    await open(id, epoch, 'CONNECT', issueIdentity(pair, 'host-m')),
    { status: 0, first: '' },
    "host-m's name with a key it did not register: refused",
  );
  assert.equal(await open(id, epoch, 'CONNECT', issueIdentity(pair, 'host-b')), { status: 0, first: '' }, "B's name with a key B did not register: refused");
  assert.is((await open(id, epoch + 1)).status, 421, 'another epoch: not here');
  assert.is((await open('srv_nothere', epoch)).status, 421, 'a server A does not run: not here');
  const taken = await open(id, epoch);
  assert.is(taken.status, 200);
  assert.match(taken.first, /^SSH-2\.0-rootbox/, "A's SSH server speaks on the stream");
  assert.is((await open(id, epoch, 'POST')).status, 400, 'a request (not a CONNECT) with the SSH marker is refused');
  // a client of B's edge sending the marker gets the web page, never an SSH stream
  const logins = a.logs.filter((l) => l.msg === 'ssh login').length;
  const web = await run('curl', [
    '-sS',
    '-H',
    'host: far.localhost',
    '-H',
    'x-rootbox-kind: ssh',
    '-H',
    `x-rootbox-server: ${id}`,
    '-H',
    `x-rootbox-epoch: ${epoch}`,
    `http://127.0.0.1:${b.http}/`,
  ]);
  assert.is(web.code, 0, web.stderr);
  assert.not.match(web.stdout, /SSH-2\.0/);
  assert.is(a.logs.filter((l) => l.msg === 'ssh login').length, logins);
  for (const d of [a, b]) {
    const none = await run('ssh', ['-p', String(d.daemon.ssh.port), ...CLIENT_OPTS, '-o', 'PreferredAuthentications=none', 'root@127.0.0.1', 'true']);
    assert.is(none.code, 255);
    assert.match(none.stderr, /Permission denied/);
  }
});

test("A's SSH server stopped (its channel still up): a login through B fails at once with a sentence", async () => {
  await a.daemon.ssh.stop();
  try {
    const t0 = performance.now();
    const r = await ssh('echo never');
    const ms = performance.now() - t0;
    assert.is(r.code, 1, r.stderr);
    assert.match(r.stderr, /rootbox: the host that runs this server did not open the session; try again shortly/);
    assert.ok(ms < 5000, `${ms} ms`);
  } finally {
    await a.daemon.ssh.start();
  }
});

test('A unreachable, then down: a session under way ends with a sentence, a new login fails at once saying so', async () => {
  const long = spawn('ssh', [...via(b), 'root@127.0.0.1', 'echo started; sleep 60; echo never']);
  let out = '';
  let err = '';
  long.stdout.on('data', (x: Buffer) => (out += x));
  long.stderr.on('data', (x: Buffer) => (err += x));
  const ended = new Promise<number | null>((resolve) => long.on('close', resolve));
  await until('the session to run', () => out === 'started\n', 30_000, 50);
  await a.daemon.channel!.stop(); // A's channel listener and sessions gone; its lease still runs
  assert.is(await ended, 255);
  assert.is(out, 'started\n');
  assert.match(err, /rootbox: the connection to the host that runs this server was lost/);

  const t0 = performance.now();
  const r = await ssh('echo never');
  const ms = performance.now() - t0;
  assert.is(r.code, 1, r.stderr);
  assert.is(r.stdout, '');
  assert.match(r.stderr, /rootbox: the host that runs this server \(host-a\) cannot be reached; try again shortly/);
  assert.ok(ms < 5000, `${ms} ms`);
  const fwd = await run('ssh', ['-W', 'localhost:80', ...via(b), 'root@127.0.0.1'], { input: '', timeoutMs: 20_000 });
  assert.is.not(fwd.code, 0);
  assert.match(fwd.stderr, /open failed: connect failed: the host that runs this server \(host-a\) cannot be reached/);

  await a.stop(); // its lease ends now; its placement stays in the registry
  await until('B to see A down', async () => /is down/.test((await ssh('true')).stderr), 10_000, 200);
  const t1 = performance.now();
  const down = await ssh('echo never');
  assert.is(down.code, 1);
  assert.match(down.stderr, /rootbox: the host that runs this server \(host-a\) is down; try again shortly/);
  assert.ok(performance.now() - t1 < 3000, `${performance.now() - t1} ms`);
});

test.run();
