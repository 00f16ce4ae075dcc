// bench/ssh/flood: the SSH front door under a connection flood. One address (127.0.0.2) opens
// N raw TCP connections that send an SSH banner and then nothing, and keeps re-opening them as
// they are closed; meanwhile OpenSSH logs in from another address (127.0.0.3) again and again.
// Prints: connections the flooding address holds, login time (median, max) with and without the
// flood, refusals, and how long after connect the idle sockets are destroyed.
//
// Usage: node --import tsx bench/ssh/flood.ts [--conns 200] [--logins 10] [--grace 5s]

import { connect, type Socket } from 'node:net';
import { run } from '../../test/helpers/run.js';
import { addServer, sshArgs, startSshDaemon } from '../../test/ssh/helpers/env.js';

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const CONNS = Number(arg('conns', '200'));
const LOGINS = Number(arg('logins', '10'));
const GRACE = arg('grace', '5s');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return `median ${s[Math.floor(s.length / 2)]} ms, max ${s[s.length - 1]} ms (n=${s.length})`;
};

const d = await startSshDaemon({ ssh: { loginGraceTime: GRACE } });
const open = new Set<Socket>();
let stopping = false;
let refused = 0;
const destroyedAfter: number[] = [];
try {
  const { keyFile } = await addServer(d, 'flood-bench');
  const login = async () => {
    const t0 = performance.now();
    const r = await run('ssh', [...sshArgs(d.port, keyFile, ['-b', '127.0.0.3', '-o', 'ConnectTimeout=30']), 'true'], { timeoutMs: 60_000 });
    if (!/rootbox: server/.test(r.stderr)) throw new Error(`login failed: ${r.stderr}`);
    return Math.round(performance.now() - t0);
  };
  const quiet: number[] = [];
  for (let i = 0; i < LOGINS; i++) quiet.push(await login());

  /** One flooding connection; re-opened when the server closes it. */
  const flood = () => {
    if (stopping) return;
    const s = connect({ host: '127.0.0.1', port: d.port, localAddress: '127.0.0.2', allowHalfOpen: true });
    const t0 = Date.now();
    let greeted = false;
    open.add(s);
    s.on('connect', () => s.write('SSH-2.0-flood\r\n'));
    s.on('data', () => (greeted = true));
    s.on('error', () => {});
    s.on('close', () => {
      open.delete(s);
      if (greeted) destroyedAfter.push(Date.now() - t0);
      else refused += 1;
      if (!stopping) setTimeout(flood, greeted ? 0 : 50);
    });
    s.on('end', () => s.destroy());
  };
  for (let i = 0; i < CONNS; i++) flood();
  await sleep(1000);
  const held = d.daemon.ssh.stats('127.0.0.2').unauthenticated;
  const loaded: number[] = [];
  for (let i = 0; i < LOGINS; i++) loaded.push(await login());
  // Long enough for at least one generation of held sockets to reach the deadline.
  await sleep(Number.parseFloat(GRACE) * 1000 + 1500);
  stopping = true;
  console.log(`flood: ${CONNS} connections kept open from 127.0.0.2 (banner, then silence); grace ${GRACE}`);
  console.log(`held by 127.0.0.2: ${held} unauthenticated (server total ${d.daemon.ssh.stats().unauthenticated})`);
  console.log(`refused at accept: ${refused}`);
  console.log(`login from 127.0.0.3 without flood: ${stats(quiet)}`);
  console.log(`login from 127.0.0.3 during flood:  ${stats(loaded)}`);
  console.log(`held sockets destroyed after connect: ${destroyedAfter.length ? stats(destroyedAfter) : 'none yet'}`);
} finally {
  stopping = true;
  for (const s of open) s.destroy();
  await d.stop();
}
