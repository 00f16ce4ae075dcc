// The SSH front door against real runc containers, driven by the OpenSSH binaries: interactive
// shell in tmux (prompt, whoami, hostname, resize), exec exit codes and streams, env, 100 MB scp
// both ways (SFTP and legacy -O), sftp batch, rsync of a tree, ssh -L / -W forwarding and its
// refusals, isolation between two servers, 20 concurrent sessions, wake and hold, and no stray
// process in the container or the daemon after a client vanishes mid-transfer.

import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { run } from '../helpers/run.js';
import { addServer, CLIENT_OPTS, sshArgs, startSshDaemon, type SshTestDaemon, type TestServer } from './helpers/env.js';

const WEB_PY = `import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80))
s.listen(16)
body = b"hello via tunnel\\n"
while True:
    c, _ = s.accept()
    c.recv(65536)
    c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
    c.close()
`;

let d: SshTestDaemon;
let A: TestServer;
let B: TestServer;
const work = mkdtempSync(join(tmpdir(), 'rbx-ssh-files-'));
const tmuxSession = `rbxssh${process.pid}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Fails instead of hanging when a client never finishes. */
function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([p, new Promise<T>((_, reject) => (t = setTimeout(() => reject(new Error(`${what}: no result in ${ms} ms`)), ms)))]).finally(() =>
    clearTimeout(t),
  );
}
const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

const ssh = (s: TestServer, command: string, extra: string[] = [], timeoutMs = 60_000) =>
  run('ssh', [...sshArgs(d.port, s.keyFile, extra), command], { timeoutMs });
const scpOpts = (s: TestServer) => ['-P', String(d.port), '-i', s.keyFile, ...CLIENT_OPTS];
const rshFor = (s: TestServer) => `ssh -p ${d.port} -i ${s.keyFile} ${CLIENT_OPTS.join(' ')}`;

/** Processes inside the server whose command line matches `re` (excluding the ps itself). */
async function inContainer(s: TestServer, re: RegExp): Promise<string[]> {
  const r = await ssh(s, 'ps -eo pid=,args=');
  assert.is(r.code, 0, r.stderr);
  return r.stdout.split('\n').filter((l) => re.test(l) && !/ps -eo/.test(l));
}

/** `runc exec` processes of the daemon for a server still alive on the host. */
async function hostExecs(s: TestServer): Promise<string[]> {
  const r = await run('ps', ['-eo', 'pid=,args=']);
  return r.stdout.split('\n').filter((l) => /runc/.test(l) && / exec /.test(l) && l.includes(s.rec.id));
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false>, ms = 15_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

test.before(async () => {
  try {
    // 20 parallel logins from 127.0.0.1 are more handshakes at once than one address may hold by
    // default (ssh.maxUnauthenticatedPerAddress, 10: the rest would be refused at accept).
    d = await startSshDaemon({ ssh: { maxUnauthenticatedPerAddress: 32 }, proxy: { idleTimeout: '2s', idleCheckInterval: '500ms' } });
    A = await addServer(d, 'ssh-alpha', {}, true);
    B = await addServer(d, 'ssh-bravo', {}, true);
  } catch (e) {
    console.error('ssh container suite setup failed:', e);
    throw e;
  }
});

test.after(async () => {
  await run('tmux', ['kill-session', '-t', tmuxSession]).catch(() => {});
  await d?.stop();
  rmSync(work, { recursive: true, force: true });
});

test('an interactive shell shows a root prompt in /root, hostname is the slug, and a resize reaches the terminal', async () => {
  await run('tmux', ['new-session', '-d', '-s', tmuxSession, '-x', '100', '-y', '30', ['ssh', '-tt', ...sshArgs(d.port, A.keyFile)].join(' ')]);
  await run('tmux', ['set-option', '-t', tmuxSession, 'status', 'off']);
  const pane = async () => (await run('tmux', ['capture-pane', '-p', '-t', tmuxSession])).stdout;
  const keys = (text: string) => run('tmux', ['send-keys', '-t', tmuxSession, text, 'Enter']);
  await waitFor('a prompt', async () => /root@ssh-alpha:~# *$/m.test(await pane()));
  await keys('echo "who=$(whoami) host=$(hostname) pwd=$PWD term=$TERM size=$(stty size)"');
  await waitFor('whoami output', async () => /who=root host=ssh-alpha pwd=\/root term=\S+ size=\d+ \d+/.test(await pane()));
  await run('tmux', ['resize-window', '-t', tmuxSession, '-x', '120', '-y', '40']);
  await sleep(300);
  await keys('echo "resized=$(stty size)"');
  const text = await waitFor('resize output', async () => {
    const p = await pane();
    return /resized=\d+ \d+/.test(p) && p;
  });
  assert.match(text, /resized=40 120/);
  await keys('exit 0');
  await waitFor('the session to end', async () => (await run('tmux', ['has-session', '-t', tmuxSession])).code !== 0);
});

test('exec passes the exit status, keeps stdout and stderr apart, and takes LANG/LC_* but no other variables', async () => {
  const r7 = await ssh(A, 'exit 7');
  assert.is(r7.code, 7);
  const io = await ssh(A, 'echo out; echo err >&2; whoami; pwd; hostname');
  assert.is(io.code, 0);
  assert.is(io.stdout, 'out\nroot\n/root\nssh-alpha\n');
  assert.match(io.stderr, /(^|\n)err\n/);
  const env = await run(
    'ssh',
    [...sshArgs(d.port, A.keyFile, ['-o', 'SendEnv=LANG LC_TIME RBX_SECRET']), 'echo "lang=$LANG time=$LC_TIME x=${RBX_SECRET:-unset}"'],
    {
      env: { ...process.env, LANG: 'C.UTF-8', LC_TIME: 'C', RBX_SECRET: 'leak' },
    },
  );
  assert.is(env.stdout.trim(), 'lang=C.UTF-8 time=C x=unset');
  // Binary-safe both ways: every byte value, CR/LF and NUL untouched.
  const data = Buffer.concat([Buffer.from([0, 1, 2, 255, 10, 13, 0, 3, 4]), randomBytes(256 * 1024)]);
  const echoed = await within(
    30_000,
    'ssh cat',
    new Promise<Buffer>((resolve, reject) => {
      const c = spawn('ssh', [...sshArgs(d.port, A.keyFile), 'cat']);
      const out: Buffer[] = [];
      c.stdout.on('data', (b: Buffer) => out.push(b));
      c.on('error', reject);
      c.on('close', () => resolve(Buffer.concat(out)));
      c.stdin.end(data);
    }),
  );
  assert.ok(echoed.equals(data), `echoed ${echoed.length} bytes, sent ${data.length}`);
});

test('a signal request reaches the running command (ssh2 client; OpenSSH has no command for it)', async () => {
  const c = new ssh2.Client();
  const out = await within(
    30_000,
    'signal session',
    new Promise<string>((resolve, reject) => {
      c.on('error', reject);
      c.on('ready', () =>
        c.exec(`trap 'echo got-term; kill $!; exit 3' TERM; echo ready; sleep 30 & wait`, (err, ch) => {
          if (err) return reject(err);
          let text = '';
          ch.on('data', (b: Buffer) => {
            text += b;
            if (text === 'ready\n') ch.signal('TERM');
          });
          ch.stderr.resume();
          ch.on('close', (code: number) => {
            c.end();
            resolve(`${text.trim().replace(/\n/g, ' ')} exit=${code}`);
          });
        }),
      );
      c.connect({ host: '127.0.0.1', port: d.port, username: 'root', privateKey: readFileSync(A.keyFile), readyTimeout: 20_000 });
    }),
  ).finally(() => c.end());
  assert.is(out, 'ready got-term exit=3');
});

test('100 MB goes up and down with scp (SFTP and legacy -O) with matching sha256', async () => {
  const src = join(work, 'big.bin');
  const rnd = await run('sh', ['-c', `head -c 104857600 /dev/urandom > ${src}`]);
  assert.is(rnd.code, 0);
  const want = sha(src);
  const up = await run('scp', [...scpOpts(A), src, 'root@127.0.0.1:/root/big.bin'], { timeoutMs: 120_000 });
  assert.is(up.code, 0, up.stderr);
  const remote = await ssh(A, 'sha256sum /root/big.bin');
  assert.is(remote.stdout.split(' ')[0], want);
  const down = join(work, 'big.down');
  const get = await run('scp', [...scpOpts(A), 'root@127.0.0.1:/root/big.bin', down], { timeoutMs: 120_000 });
  assert.is(get.code, 0, get.stderr);
  assert.is(sha(down), want);
  const legacyUp = await run('scp', ['-O', ...scpOpts(A), src, 'root@127.0.0.1:/root/legacy.bin'], { timeoutMs: 120_000 });
  assert.is(legacyUp.code, 0, legacyUp.stderr);
  const legacyDown = join(work, 'legacy.down');
  const lget = await run('scp', ['-O', ...scpOpts(A), 'root@127.0.0.1:/root/legacy.bin', legacyDown], { timeoutMs: 120_000 });
  assert.is(lget.code, 0, lget.stderr);
  assert.is(sha(legacyDown), want);
  await ssh(A, 'rm -f /root/big.bin /root/legacy.bin');
  rmSync(down);
  rmSync(legacyDown);
});

test('sftp in batch mode puts, lists, gets and removes', async () => {
  const f = join(work, 'note.txt');
  writeFileSync(f, 'sftp works\n'.repeat(1000));
  const back = join(work, 'note.back');
  const batch = join(work, 'batch');
  writeFileSync(batch, `put ${f} /root/note.txt\nls -l /root\nget /root/note.txt ${back}\nrm /root/note.txt\nls /root\n`);
  const r = await run('sftp', ['-b', batch, ...scpOpts(A), 'root@127.0.0.1'], { timeoutMs: 60_000 });
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /note\.txt/);
  assert.is(readFileSync(back, 'utf8'), readFileSync(f, 'utf8'));
  const gone = await ssh(A, 'test -e /root/note.txt && echo present || echo gone');
  assert.is(gone.stdout.trim(), 'gone');
});

test('rsync -e ssh copies a directory tree up and back', async () => {
  const tree = join(work, 'tree');
  mkdirSync(join(tree, 'a/b/c'), { recursive: true });
  for (let i = 0; i < 30; i++) writeFileSync(join(tree, `a/${i % 2 ? 'b/' : ''}f${i}.txt`), `file ${i}\n`.repeat(i * 50 + 1));
  writeFileSync(join(tree, 'a/b/c/deep.bin'), Buffer.alloc(300_000, 7));
  symlinkSync('b/c/deep.bin', join(tree, 'a/link'));
  const up = await run('rsync', ['-a', '-e', rshFor(A), `${tree}/`, 'root@127.0.0.1:/root/tree/'], { timeoutMs: 60_000 });
  assert.is(up.code, 0, up.stderr);
  const listing = await ssh(A, 'cd /root/tree && find . -type f | sort | xargs sha256sum && readlink a/link');
  const local = await run('sh', ['-c', `cd ${tree} && find . -type f | sort | xargs sha256sum && readlink a/link`]);
  assert.is(listing.stdout, local.stdout);
  const back = join(work, 'tree.back');
  const down = await run('rsync', ['-a', '-e', rshFor(A), 'root@127.0.0.1:/root/tree/', `${back}/`], { timeoutMs: 60_000 });
  assert.is(down.code, 0, down.stderr);
  const local2 = await run('sh', ['-c', `cd ${back} && find . -type f | sort | xargs sha256sum && readlink a/link`]);
  assert.is(local2.stdout, local.stdout);
});

test('ssh -L reaches a port-80 server in the container; other destinations are refused with a reason', async () => {
  // python3-minimal has no http.server; a socket loop answering every request is enough.
  writeFileSync(join(work, 'web.py'), WEB_PY);
  const put = await run('scp', [...scpOpts(A), join(work, 'web.py'), 'root@127.0.0.1:/root/web.py']);
  assert.is(put.code, 0, put.stderr);
  const start = await ssh(A, '(nohup python3 /root/web.py >/dev/null 2>&1 &)');
  assert.is(start.code, 0, start.stderr);
  const ip = d.daemon.runtime.get(A.rec.id)!.ip;
  await waitFor('the web server in the container', async () => (await ssh(A, 'ps -eo args')).stdout.includes('python3 /root/web.py'));
  const probe = await run('python3', ['-c', 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])']);
  const local = Number(probe.stdout.trim());
  const tunnel = spawn('ssh', ['-N', '-L', `${local}:localhost:80`, ...sshArgs(d.port, A.keyFile)], { stdio: 'ignore' });
  try {
    const body = await waitFor('the tunnel', async () => {
      const r = await run('curl', ['-sS', '--max-time', '5', `http://127.0.0.1:${local}/`]);
      return r.code === 0 && r.stdout;
    });
    assert.is(body, 'hello via tunnel\n');
  } finally {
    tunnel.kill('SIGTERM');
  }
  const viaIp = await run('ssh', ['-W', `${ip}:80`, ...sshArgs(d.port, A.keyFile)], { input: 'GET / HTTP/1.0\r\n\r\n', timeoutMs: 20_000 });
  assert.match(viaIp.stdout, /^HTTP\/1\.0 200/);
  const ipB = d.daemon.runtime.get(B.rec.id)!.ip;
  for (const dest of [`${ipB}:80`, '1.1.1.1:443', `${ip.replace(/\.\d+$/, '.1')}:22`]) {
    const r = await run('ssh', ['-W', dest, ...sshArgs(d.port, A.keyFile)], { input: '', timeoutMs: 20_000 });
    assert.is.not(r.code, 0, dest);
    assert.match(r.stderr, /administratively prohibited: rootbox forwards only to this server itself/, dest);
  }
  const closed = await run('ssh', ['-W', 'localhost:81', ...sshArgs(d.port, A.keyFile)], { input: '', timeoutMs: 20_000 });
  assert.match(closed.stderr, /connect to port 81 failed: ECONNREFUSED/);
  await ssh(A, 'pkill -f web.py');
});

test('each key opens its own server only', async () => {
  const a = await ssh(A, 'hostname; echo alpha-was-here > /root/mark');
  const b = await ssh(B, 'hostname; cat /root/mark 2>/dev/null || echo no-mark');
  assert.is(a.stdout, 'ssh-alpha\n');
  assert.is(b.stdout, 'ssh-bravo\nno-mark\n');
});

test('20 concurrent sessions all run and return their own output', async () => {
  const results = await Promise.all(Array.from({ length: 20 }, (_, i) => ssh(i % 2 ? B : A, `sleep 1; echo $((${i} * ${i})) $(hostname)`, [], 120_000)));
  results.forEach((r, i) => {
    assert.is(r.code, 0, r.stderr);
    assert.is(r.stdout.trim(), `${i * i} ${i % 2 ? 'ssh-bravo' : 'ssh-alpha'}`);
  });
});

test('a client that vanishes mid-transfer or mid-command leaves no process behind in the container or the daemon', async () => {
  const src = join(work, 'vanish.bin');
  await run('sh', ['-c', `head -c 209715200 /dev/urandom > ${src}`]);
  const clients = [
    spawn('scp', ['-l', '80000', ...scpOpts(A), src, 'root@127.0.0.1:/root/vanish.bin'], { stdio: 'ignore' }),
    spawn('scp', ['-O', '-l', '80000', ...scpOpts(A), src, 'root@127.0.0.1:/root/vanish-legacy.bin'], { stdio: 'ignore' }),
    spawn('ssh', [...sshArgs(d.port, A.keyFile), 'sleep 1000; echo never']),
    spawn('ssh', ['-tt', ...sshArgs(d.port, A.keyFile), 'sleep 1001']),
    spawn('ssh', [...sshArgs(d.port, A.keyFile), 'sleep 1002 | cat']),
  ];
  await waitFor('the transfers and commands to be running', async () => (await inContainer(A, /sftp-server|scp -t|sleep 100[0-2]/)).length >= 5);
  for (const c of clients) c.kill('SIGKILL');
  const left = await waitFor(
    'the container to be clean',
    async () => {
      const procs = await inContainer(A, /sftp-server|scp -t|sleep 100[0-2]|\bcat\b/);
      return procs.length === 0 && ['clean'];
    },
    20_000,
  ).catch(async (e) => {
    throw new Error(`${(e as Error).message}: ${(await inContainer(A, /sftp-server|scp -t|sleep 100|\bcat\b/)).join(' | ')}`);
  });
  assert.equal(left, ['clean']);
  // The only runc exec on the host for A is the ps we just ran, and it is gone.
  await waitFor('no runc exec on the host', async () => (await hostExecs(A)).length === 0 && true);
  await ssh(A, 'rm -f /root/vanish.bin /root/vanish-legacy.bin');
});

test('logging in wakes a sleeping server, and an open session keeps it awake past the idle timeout', async () => {
  await waitFor(
    'A to fall asleep (idleTimeout 2s)',
    async () => d.daemon.runtime.get(A.rec.id)?.state === 'sleeping' || d.daemon.runtime.get(A.rec.id)?.state === 'stopped',
    30_000,
  );
  const woke = await ssh(A, 'echo awake; sleep 5; echo still-awake', [], 60_000);
  assert.is(woke.code, 0, woke.stderr);
  assert.is(woke.stdout, 'awake\nstill-awake\n');
});

test.run();
