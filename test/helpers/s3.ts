// A real S3 server for the tests: Debian's Ceph RADOS Gateway (16.x) on a one-node cluster of its
// own (../shared/notes/s3-for-tests.md has the measured settings): one mon, one OSD with bluestore
// on a sparse 8 GiB file that sits outside the OSD's data dir, no mgr, radosgw with the beast
// frontend on 127.0.0.1. Everything lives in a fresh temp dir (config, keyring, logs, admin
// sockets, data) and on ports of its own (mon, RGW, and the OSD's messenger range), so parallel
// runs never meet. cephx between the daemons (auth none makes radosgw refuse to connect); an S3
// user made with radosgw-admin. Ready means: the OSD's admin socket says "active", RGW's admin
// socket answers, and a first PUT into a bucket succeeded.
// killRgw()/stopRgw()/contRgw()/startRgw() break and mend the gateway for the failure tests;
// stop() kills every daemon by its PID and removes the dir (also at the test process's exit,
// so a failed or killed test leaves nothing running).

import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { freePort } from './ports.js';
import { run } from './run.js';
import { sleep } from './wait.js';

export interface TestS3 {
  /** http://127.0.0.1:<port> */
  endpoint: string;
  dir: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** The credentials as every S3 tool reads them. */
  env: { AWS_ACCESS_KEY_ID: string; AWS_SECRET_ACCESS_KEY: string };
  /** A new bucket (a unique name unless given). */
  bucket(name?: string): Promise<string>;
  /** A raw SDK client with the user's credentials (tests' own checks). */
  client(): S3Client;
  /** SIGKILL of radosgw: the store is gone (connections refused). */
  killRgw(): Promise<void>;
  /** SIGSTOP of radosgw: connections are accepted by the kernel and never answered. */
  pauseRgw(): void;
  /** SIGCONT after pauseRgw. */
  contRgw(): void;
  /** Starts radosgw again on the same port; resolves once a PUT succeeds. */
  startRgw(): Promise<void>;
  /** Kills every daemon and removes the dir. */
  stop(): Promise<void>;
}

const STARTUP_MS = 90_000;

/** `n` consecutive free ports on 127.0.0.1 (the OSD binds several from its range). */
async function freeRange(n: number): Promise<number> {
  const bindable = (p: number) =>
    new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(p, '127.0.0.1', () => s.close(() => resolve(true)));
    });
  for (let i = 0; i < 100; i++) {
    const base = 20_000 + Math.floor(Math.random() * 9_000);
    let ok = true;
    for (let p = base; p < base + n && ok; p++) ok = await bindable(p);
    if (ok) return base;
  }
  throw new Error(`no ${n} consecutive free ports in 20000-29000`);
}

function conf(dir: string, fsid: string, mon: number, rgw: number, osdPorts: number): string {
  return `[global]
fsid = ${fsid}
mon host = v2:127.0.0.1:${mon}
mon initial members = a
public network = 127.0.0.0/8
auth allow insecure global id reclaim = false
ms bind msgr1 = false
ms bind msgr2 = true
ms bind port min = ${osdPorts}
ms bind port max = ${osdPorts + 7}
run dir = ${dir}/run
admin socket = ${dir}/run/$name.asok
log file = ${dir}/log/$name.log
pid file = ${dir}/run/$name.pid
keyring = ${dir}/keyring
client mount timeout = 20
rados mon op timeout = 20
mon data = ${dir}/mon
mon data avail warn = 1
mon data avail crit = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
paxos propose interval = 0.05
osd data = ${dir}/osd
osd objectstore = bluestore
bluestore block path = ${dir}/block
bluestore block create = true
bluestore block size = ${8 * 1024 ** 3}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
rgw gc obj min wait = 30
rgw gc processor period = 30
rgw frontends = beast endpoint=127.0.0.1:${rgw}
rgw data = ${dir}/rgw
`;
}

const tail = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').slice(-15).join('\n') : '(no log)');

export async function startS3(): Promise<TestS3> {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-s3-'));
  for (const d of ['run', 'log', 'mon', 'osd', 'rgw']) mkdirSync(join(dir, d));
  const [monPort, rgwPort, osdPorts] = [await freePort(), await freePort(), await freeRange(8)];
  const cfg = join(dir, 'ceph.conf');
  writeFileSync(cfg, conf(dir, randomUUID(), monPort, rgwPort, osdPorts));
  const endpoint = `http://127.0.0.1:${rgwPort}`;
  const procs = new Map<string, ChildProcess>();
  let user = { accessKeyId: '', secretAccessKey: '' };
  let sdk: S3Client | undefined;
  let first = '';
  let stopped = false;

  const must = async (cmd: string, args: string[], what: string) => {
    const r = await run(cmd, args, { timeoutMs: 60_000 });
    if (r.code !== 0) throw new Error(`${what} failed (${r.code}): ${(r.stderr || r.stdout).slice(-2000)}`);
    return r.stdout;
  };
  const daemon = (name: string, cmd: string, args: string[]) => {
    const child = spawn(cmd, ['-c', cfg, ...args, '-f'], { stdio: 'ignore' });
    child.on('error', () => {}); // a missing binary shows as the readiness failure below
    procs.set(name, child);
  };
  const kill = (name: string, sig: NodeJS.Signals = 'SIGKILL') => {
    const child = procs.get(name);
    if (child?.pid && child.exitCode === null && child.signalCode === null) process.kill(child.pid, sig);
  };
  const exited = (name: string) =>
    new Promise<void>((resolve) => {
      const child = procs.get(name);
      if (!child || child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
    });
  const cleanup = () => {
    if (stopped) return;
    stopped = true;
    sdk?.destroy();
    for (const name of procs.keys()) kill(name, 'SIGCONT');
    for (const name of procs.keys()) kill(name);
    rmSync(dir, { recursive: true, force: true });
  };
  const onExit = () => cleanup();
  process.once('exit', onExit);
  // a file the runner ends (its time limit: SIGTERM) leaves nothing running either
  for (const sig of ['SIGTERM', 'SIGINT'] as const) if (process.listenerCount(sig) === 0) process.once(sig, () => process.exit(sig === 'SIGTERM' ? 143 : 130));

  /** Polls `check` until it holds; the error names `what` and shows the daemon's log. */
  const ready = async (what: string, log: string, check: () => Promise<boolean>) => {
    const end = Date.now() + STARTUP_MS;
    while (!(await check().catch(() => false))) {
      if (Date.now() > end) throw new Error(`${what} not ready after ${STARTUP_MS} ms; ${log}:\n${tail(join(dir, 'log', log))}`);
      await sleep(100);
    }
  };
  const asok = async (name: string, cmd: string) => (await run('ceph', ['--admin-daemon', join(dir, 'run', `${name}.asok`), cmd], { timeoutMs: 5000 })).stdout;
  const client = () =>
    (sdk ??= new S3Client({
      region: 'us-east-1',
      endpoint,
      forcePathStyle: true,
      credentials: user,
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      maxAttempts: 1,
    }));
  const bucket = async (name = `b-${randomUUID().slice(0, 12)}`) => {
    await client().send(new CreateBucketCommand({ Bucket: name }));
    return name;
  };
  const startRgw = async () => {
    daemon('rgw', 'radosgw', ['-n', 'client.rgw']);
    await ready('radosgw admin socket', 'client.rgw.log', async () => (await asok('client.rgw', 'version')).includes('version'));
    // the beast frontend listens once the gateway's pools and zone exist
    await ready('radosgw frontend', 'client.rgw.log', async () => (await fetch(endpoint, { signal: AbortSignal.timeout(2000) })).status > 0);
  };

  try {
    const auth = (name: string, ...caps: string[]) => must('ceph-authtool', [join(dir, 'keyring'), '--gen-key', '-n', name, ...caps], 'ceph-authtool');
    await must('ceph-authtool', ['--create-keyring', join(dir, 'keyring'), '--gen-key', '-n', 'mon.', '--cap', 'mon', 'allow *'], 'ceph-authtool');
    await auth('client.admin', '--cap', 'mon', 'allow *', '--cap', 'osd', 'allow *', '--cap', 'mgr', 'allow *');
    await auth('osd.0', '--cap', 'mon', 'allow profile osd', '--cap', 'osd', 'allow *');
    await auth('client.rgw', '--cap', 'mon', 'allow rw', '--cap', 'osd', 'allow rwx');
    const fsid = /fsid = (\S+)/.exec(readFileSync(cfg, 'utf8'))![1];
    await must('monmaptool', ['--create', '--addv', 'a', `[v2:127.0.0.1:${monPort}]`, '--fsid', fsid, join(dir, 'monmap')], 'monmaptool');
    await must('ceph-mon', ['-c', cfg, '--mkfs', '-i', 'a', '--monmap', join(dir, 'monmap')], 'ceph-mon --mkfs');
    daemon('mon', 'ceph-mon', ['-i', 'a']);
    const osdUuid = randomUUID();
    await must('ceph', ['-c', cfg, '--connect-timeout', '30', 'osd', 'new', osdUuid, '0'], 'ceph osd new');
    await must('ceph-osd', ['-c', cfg, '-i', '0', '--mkfs', '--osd-uuid', osdUuid], 'ceph-osd --mkfs');
    daemon('osd', 'ceph-osd', ['-i', '0']);
    await ready('OSD', 'osd.0.log', async () => /"state":\s*"active"/.test(await asok('osd.0', 'status')));
    await startRgw();
    const made = JSON.parse(
      await must('radosgw-admin', ['-c', cfg, 'user', 'create', '--uid', 'rootbox-test', '--display-name', 'rootbox test'], 'radosgw-admin user create'),
    );
    user = { accessKeyId: made.keys[0].access_key, secretAccessKey: made.keys[0].secret_key };
    await ready('a first PUT', 'client.rgw.log', async () => {
      first ||= await bucket();
      await client().send(new PutObjectCommand({ Bucket: first, Key: 'ready', Body: 'ok' }));
      return true;
    });
  } catch (e) {
    cleanup();
    process.removeListener('exit', onExit);
    throw e;
  }

  return {
    endpoint,
    dir,
    ...user,
    env: { AWS_ACCESS_KEY_ID: user.accessKeyId, AWS_SECRET_ACCESS_KEY: user.secretAccessKey },
    bucket,
    client,
    async killRgw() {
      kill('rgw', 'SIGCONT');
      kill('rgw');
      await exited('rgw');
    },
    pauseRgw: () => kill('rgw', 'SIGSTOP'),
    contRgw: () => kill('rgw', 'SIGCONT'),
    async startRgw() {
      await startRgw();
      await ready('a PUT after the restart', 'client.rgw.log', async () => {
        await client().send(new PutObjectCommand({ Bucket: first, Key: 'ready', Body: 'ok' }));
        return true;
      });
    },
    async stop() {
      const all = [...procs.keys()].map(exited);
      cleanup();
      await Promise.all(all);
      process.removeListener('exit', onExit);
    },
  };
}
