// The ports `rootbox install` writes: what listens is read from /proc/net/tcp{,6} (real listeners
// opened here, IPv4 and IPv6), a taken production port falls back to the development one with a
// sentence naming the holder and the flag, a flag or an earlier config wins, and a port nobody
// can have is refused naming the flag.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { realpathSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { basename } from 'node:path';
import { choosePorts, listeningPorts } from '../../src/ops/index.js';

const listen = (host: string) =>
  new Promise<{ server: Server; port: number }>((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, host, () => resolve({ server, port: (server.address() as { port: number }).port }));
  });
/** How a port held by this process is named: its executable's name. */
const self = basename(realpathSync(process.execPath));
const close = (s: Server) => new Promise((r) => s.close(r));

test('listening ports are read from /proc for IPv4 and IPv6, and a closed one is gone', async () => {
  const v4 = await listen('127.0.0.1');
  const v6 = await listen('::1');
  try {
    const seen = listeningPorts();
    assert.ok(seen.has(v4.port), `${v4.port} (IPv4) not seen`);
    assert.ok(seen.has(v6.port), `${v6.port} (IPv6) not seen`);
  } finally {
    await close(v4.server);
    await close(v6.server);
  }
  const after = listeningPorts();
  assert.not.ok(after.has(v4.port) || after.has(v6.port), 'closed listeners still seen');
});

test('production ports when nothing listens on them', () => {
  const c = choosePorts({}, {}, new Map());
  assert.equal(c.ports, { http: 80, https: 443, ssh: 22 });
  assert.equal(c.notes, []);
});

test('a taken port falls back to the other one, saying which was taken, by what, and the flag', async () => {
  const taken = await listen('127.0.0.1');
  const free = await listen('127.0.0.1');
  await close(free.server); // a port known to be free now
  try {
    const c = choosePorts({}, {}, listeningPorts(), { ssh: { port: taken.port, fallback: free.port } });
    assert.equal(c.ports, { http: 80, https: 443, ssh: free.port });
    assert.is(c.notes.length, 1);
    assert.ok(c.notes[0].includes(`ssh port ${taken.port} is taken (by ${self}): rootbox ssh listens on ${free.port}`), c.notes[0]);
    assert.match(c.notes[0], /OpenSSH to another port/);
    assert.match(c.notes[0], /--ssh-port chooses/);
  } finally {
    await close(taken.server);
  }
});

test('both the port and its fallback taken: refused, naming the flag', async () => {
  const a = await listen('127.0.0.1');
  const b = await listen('::1');
  try {
    assert.throws(
      () => choosePorts({}, {}, listeningPorts(), { http: { port: a.port, fallback: b.port } }),
      (e: Error) => e.message.includes(`http ports ${a.port}`) && e.message.includes(`and ${b.port}`) && e.message.includes('--http-port'),
    );
  } finally {
    await close(a.server);
    await close(b.server);
  }
});

test("a flag wins over the config's port, which wins over the default; a flag on a busy port is kept with a note", async () => {
  const busy = await listen('127.0.0.1');
  try {
    const c = choosePorts({ https: busy.port }, { http: 8081, https: 9443, ssh: 2200 }, listeningPorts());
    assert.equal(c.ports, { http: 8081, https: busy.port, ssh: 2200 });
    assert.equal(c.notes, [`https port ${busy.port} is in use now (by ${self}): rootbox cannot listen there until it is free`]);
  } finally {
    await close(busy.server);
  }
});

test('two listeners on one port are refused', () => {
  assert.throws(() => choosePorts({ http: 8000, ssh: 8000 }, {}, new Map()), /share port 8000/);
});

test.run();
