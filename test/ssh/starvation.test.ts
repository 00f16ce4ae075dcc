// Nobody can starve the SSH front door: raw TCP clients from node `net` (bound to their own
// 127.0.0.x source address) hold connections open silently, with only a banner, or stalled in
// the middle of a packet, while the OpenSSH client logs in from another address. Checks the
// per-address and total caps on unauthenticated connections, the hard login deadline (the server
// destroys the socket: the client sees EOF, then a reset on its next writes, and the server's
// connection count drops), and prints the figures (held connections, login time under a flood,
// time until idle sockets are gone).

import { connect, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { run } from '../helpers/run.js';
import { addServer, sshArgs, startSshDaemon, type SshTestDaemon } from './helpers/env.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const daemons: SshTestDaemon[] = [];
const sockets: Socket[] = [];
async function daemon(ssh: Record<string, unknown>) {
  const d = await startSshDaemon({ ssh });
  daemons.push(d);
  return d;
}
test.after.each(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const d of daemons.splice(0)) await d.stop().catch(() => {});
});

async function until(what: string, ms: number, ok: () => boolean): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(20);
  }
}

type Kind = 'silent' | 'banner' | 'partial';

/** A raw client that never finishes a login; it never closes or half-closes its side itself. */
interface Raw {
  sock: Socket;
  opened: number;
  /** The server's identification line arrived (it was admitted to the handshake). */
  greeted: boolean;
  /** When the server ended the connection (its FIN, a reset or the socket closing, whichever came first). */
  endAt?: number;
  closed: boolean;
  error?: string;
}

function raw(port: number, from: string, kind: Kind): Promise<Raw> {
  return new Promise((resolve) => {
    const sock = connect({ host: '127.0.0.1', port, localAddress: from, allowHalfOpen: true });
    sockets.push(sock);
    const r: Raw = { sock, opened: Date.now(), greeted: false, closed: false };
    sock.on('connect', () => {
      r.opened = Date.now();
      if (kind !== 'silent') sock.write('SSH-2.0-OpenSSH_9.6\r\n');
      // A KEXINIT packet that announces 1020 bytes and delivers 8: stalled in the key exchange.
      if (kind === 'partial') sock.write(Buffer.concat([Buffer.from([0, 0, 3, 0xfc, 4, 20]), Buffer.alloc(6)]));
      resolve(r);
    });
    sock.on('data', (b: Buffer) => {
      if (b.toString('latin1').startsWith('SSH-2.0-')) r.greeted = true;
    });
    const ended = () => (r.endAt ??= Date.now());
    sock.on('end', ended);
    sock.on('error', (e: NodeJS.ErrnoException) => {
      r.error = e.code ?? e.message;
      ended();
    });
    sock.on('close', () => {
      r.closed = true;
      ended();
    });
  });
}

/** True when the server has let go of the socket entirely: writes now meet a reset. */
async function fullyClosed(r: Raw): Promise<boolean> {
  for (let i = 0; i < 5 && !r.closed; i++) {
    r.sock.write('more bytes\r\n');
    await sleep(50);
  }
  return r.closed && /ECONNRESET|EPIPE/.test(r.error ?? '');
}

async function timedLogin(d: SshTestDaemon, keyFile: string, from: string): Promise<{ ms: number; stderr: string }> {
  const t0 = performance.now();
  const r = await run('ssh', [...sshArgs(d.port, keyFile, ['-b', from, '-o', 'ConnectTimeout=20']), 'true'], { timeoutMs: 30_000 });
  return { ms: Math.round(performance.now() - t0), stderr: r.stderr };
}
// No container behind the record: a login that got in is told why its command cannot run.
const LOGGED_IN = /rootbox: server srv_\w+ (does not exist|is not known to the container runtime)/;

test('200 idle connections from one address hold only its 10 slots: a login from another address gets in, and the idle ones are destroyed at the grace', async () => {
  const graceMs = 3000;
  const d = await daemon({ loginGraceTime: graceMs, maxUnauthenticatedPerAddress: 10 });
  const { keyFile } = await addServer(d, 'flood-target');
  const quiet = await timedLogin(d, keyFile, '127.0.0.3');
  assert.match(quiet.stderr, LOGGED_IN);

  const flood = await Promise.all(Array.from({ length: 200 }, () => raw(d.port, '127.0.0.2', 'banner')));
  await until('every flood connection to be greeted or dropped', 5000, () => flood.every((r) => r.greeted || r.endAt !== undefined));
  const login = await timedLogin(d, keyFile, '127.0.0.3');
  assert.match(login.stderr, LOGGED_IN);
  assert.ok(login.ms < 10_000, `login took ${login.ms} ms during the flood`);

  const held = flood.filter((r) => r.greeted);
  assert.is(held.length, 10, 'connections the flooding address holds');
  assert.is(d.daemon.ssh.stats('127.0.0.2').unauthenticated, 10);
  // The refused ones were closed at once, before the server said a word.
  assert.ok(flood.filter((r) => !r.greeted).every((r) => r.endAt !== undefined && r.endAt - r.opened < 2000));
  assert.ok(d.logs.some((l) => l.msg === 'ssh connection refused' && l.ip === '127.0.0.2'));

  await until('the held connections to be ended by the server', graceMs + 5000, () => held.every((r) => r.endAt !== undefined));
  const gone = held.map((r) => r.endAt! - r.opened);
  for (const r of held) assert.ok(await fullyClosed(r), `socket still open after the deadline (error ${r.error})`);
  assert.ok(Math.min(...gone) >= graceMs - 100, `closed before the grace: ${Math.min(...gone)} ms`);
  await until('the server to drop its connections', 2000, () => d.daemon.ssh.stats().connections === 0);
  assert.is(d.daemon.ssh.stats().unauthenticated, 0);
  console.log(
    `  figures: flood of 200 from 127.0.0.2, held ${held.length}; login from 127.0.0.3 ${login.ms} ms during the flood (${quiet.ms} ms without);` +
      ` idle sockets destroyed ${Math.min(...gone)}–${Math.max(...gone)} ms after connect (grace ${graceMs} ms)`,
  );
});

test('silent, banner-only and mid-packet connections are all destroyed at the grace, not half-closed', async () => {
  const d = await daemon({ loginGraceTime: '2s' });
  const kinds: Kind[] = ['silent', 'banner', 'partial'];
  const conns = await Promise.all(kinds.map((k, i) => raw(d.port, `127.0.0.${10 + i}`, k)));
  await until('the server to see them', 2000, () => d.daemon.ssh.stats().connections === 3);
  await sleep(1000);
  assert.ok(
    conns.every((r) => r.endAt === undefined),
    'nothing is closed before the grace',
  );
  await until('the deadline to close them', 6000, () => conns.every((r) => r.endAt !== undefined));
  for (const [i, r] of conns.entries()) {
    assert.ok(await fullyClosed(r), `${kinds[i]}: the server only half-closed (error ${r.error})`);
    assert.ok(r.endAt! - r.opened >= 1900, `${kinds[i]} closed after ${r.endAt! - r.opened} ms`);
  }
  assert.is(d.daemon.ssh.stats().connections, 0);
  assert.is(d.logs.filter((l) => l.msg === 'ssh login timed out').length, 3);
});

test('at the total cap, when every address holds one slot, a new address is refused until a slot frees', async () => {
  const d = await daemon({ loginGraceTime: '30s', maxUnauthenticatedPerAddress: 3, maxUnauthenticated: 5 });
  const { keyFile } = await addServer(d, 'total-cap');
  const held = await Promise.all([20, 21, 22, 23, 24].map((n) => raw(d.port, `127.0.0.${n}`, 'silent')));
  await until('five to be held', 3000, () => d.daemon.ssh.stats().unauthenticated === 5);
  const refused = await raw(d.port, '127.0.0.25', 'silent');
  await until('the sixth to be dropped', 3000, () => refused.endAt !== undefined);
  assert.not.ok(refused.greeted);
  const blocked = await run('ssh', [...sshArgs(d.port, keyFile, ['-b', '127.0.0.25']), 'true'], { timeoutMs: 15_000 });
  assert.is(blocked.code, 255);
  assert.ok(d.logs.some((l) => l.msg === 'ssh connection refused' && l.limit === 5));
  assert.ok(
    held.every((r) => r.endAt === undefined),
    'no holder of one slot loses it',
  );
  held[0].sock.destroy();
  await until('a slot to free', 3000, () => d.daemon.ssh.stats().unauthenticated === 4);
  const ok = await run('ssh', [...sshArgs(d.port, keyFile, ['-b', '127.0.0.25']), 'true'], { timeoutMs: 15_000 });
  assert.match(ok.stderr, LOGGED_IN);
  // A login frees its slot as soon as it authenticates: the count is back to the idle ones.
  assert.is(d.daemon.ssh.stats().unauthenticated, 4);
});

test('at the total cap a new address takes the oldest slot of the address holding the most, not one of an address holding as many as it would', async () => {
  const d = await daemon({ loginGraceTime: '30s', maxUnauthenticatedPerAddress: 3, maxUnauthenticated: 5 });
  const a: Raw[] = [];
  for (let i = 0; i < 3; i++) {
    a.push(await raw(d.port, '127.0.0.30', 'silent'));
    await until('it to be held', 3000, () => d.daemon.ssh.stats('127.0.0.30').unauthenticated === i + 1);
  }
  const b = await Promise.all([1, 2].map(() => raw(d.port, '127.0.0.31', 'silent')));
  await until('five to be held', 3000, () => d.daemon.ssh.stats().unauthenticated === 5);
  const c = await raw(d.port, '127.0.0.32', 'banner');
  await until('the newcomer to be greeted', 3000, () => c.greeted);
  await until('the oldest of 127.0.0.30 to be dropped', 3000, () => a[0].endAt !== undefined);
  assert.ok(await fullyClosed(a[0]));
  assert.ok(a.slice(1).every((r) => r.endAt === undefined) && b.every((r) => r.endAt === undefined));
  assert.is(d.daemon.ssh.stats('127.0.0.30').unauthenticated, 2);
  assert.is(d.daemon.ssh.stats().unauthenticated, 5);
  assert.ok(d.logs.some((l) => l.msg === 'ssh unauthenticated connection dropped for a newcomer' && l.ip === '127.0.0.30' && l.newcomer === '127.0.0.32'));
  // 127.0.0.32 now holds 1 and the most anyone holds is 2: a second one of its own would only move the imbalance.
  const again = await raw(d.port, '127.0.0.32', 'silent');
  await until('the second newcomer to be dropped', 3000, () => again.endAt !== undefined);
  assert.not.ok(again.greeted);
  assert.is(d.daemon.ssh.stats('127.0.0.32').unauthenticated, 1);
});

test('300 idle connections from 30 addresses fill the total cap; an OpenSSH login from another address still gets in, at once', async () => {
  const d = await daemon({ loginGraceTime: '60s', maxUnauthenticatedPerAddress: 10, maxUnauthenticated: 256 });
  const { keyFile } = await addServer(d, 'fair-target');
  const quiet = await timedLogin(d, keyFile, '127.0.1.1');
  assert.match(quiet.stderr, LOGGED_IN);
  const from = Array.from({ length: 30 }, (_, i) => `127.0.0.${101 + i}`);
  const flood = (await Promise.all(from.map((ip) => Promise.all(Array.from({ length: 10 }, () => raw(d.port, ip, 'banner')))))).flat();
  await until('every flood connection to be greeted or dropped', 10_000, () => flood.every((r) => r.greeted || r.endAt !== undefined));
  await until('the cap to be full', 5000, () => d.daemon.ssh.stats().unauthenticated === 256);
  const shares = from.map((ip) => d.daemon.ssh.stats(ip).unauthenticated);
  assert.ok(Math.max(...shares) - Math.min(...shares) <= 1, `the 256 slots are shared evenly: ${shares.join(' ')}`);

  const login = await timedLogin(d, keyFile, '127.0.1.1');
  assert.match(login.stderr, LOGGED_IN);
  assert.ok(login.ms < 10_000, `login took ${login.ms} ms with the cap full`);
  assert.ok(d.logs.some((l) => l.msg === 'ssh unauthenticated connection dropped for a newcomer' && l.newcomer === '127.0.1.1'));
  // the login took one flood slot and gave it up when it authenticated
  assert.is(d.daemon.ssh.stats().unauthenticated, 255);
  console.log(
    `  figures: 300 idle connections from 30 addresses (10 each), ${d.daemon.ssh.stats().unauthenticated + 1} held (cap 256, ${Math.min(...shares)}–${Math.max(...shares)} per address);` +
      ` OpenSSH login from 127.0.1.1 ${login.ms} ms with the cap full (${quiet.ms} ms without)`,
  );
});

test.run();
