// A request for a server that is moving off this host (issue 38 review M3): hosting's API waits
// for the move's hold (src/moves' holds, given through the channel's ServerForwarding) before it
// decides where the request goes — so a DELETE, a restore, an /expose sent in the move's last
// window is never answered by the copy that is leaving (a change to it would be lost once the
// target runs the server): when the move succeeded the request goes to the target; when it failed
// it is answered here, by the server that stayed.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Elsewhere, type ServerForwarding } from '../../src/hosting/elsewhere.js';
import { inprocRequest, inprocResponse } from '../../src/http/inproc.js';
import type { RequestInfo } from '../../src/http/index.js';
import { silentLogger } from '../../src/log/index.js';

const ID = 'srv_00aa';
const info: RequestInfo = { host: 'api.localhost', scheme: 'http', requestId: 'req_1', ip: '127.0.0.1' };
const turn = () => new Promise((r) => setImmediate(r));

function setup() {
  const local = new Set([ID]);
  const calls: string[] = [];
  let end!: () => void;
  let held: Promise<void> | undefined = new Promise<void>((r) => (end = () => ((held = undefined), r())));
  const e = new Elsewhere({ get: (id) => (local.has(id) ? {} : undefined) }, silentLogger);
  const f: ServerForwarding = {
    placed: (id) => (local.has(id) ? undefined : { serverId: id, slug: 'one', host: 'host-b', epoch: 2 }),
    up: () => true,
    hostsOf: () => [],
    refresh: async () => {},
    forward: async (host, _req, res) => (calls.push(`forwarded to ${host}`), void res.end()),
    upgrade: () => {},
    hold: (id) => (id === ID ? held : undefined),
  };
  e.bind(f);
  const router = { handle: (_req: unknown, res: { end(): void }) => (calls.push('answered here'), res.end()) };
  const send = (method: string, path: string) => {
    const { res, done } = inprocResponse(1024);
    void e.handle(router as never, inprocRequest(method, path, {}), res, info);
    return done;
  };
  return { local, calls, end: () => end(), send };
}

test('a request for a server whose move holds waits, then goes to the target that took it', async () => {
  const w = setup();
  const done = w.send('DELETE', `/servers/${ID}`);
  for (let i = 0; i < 5; i++) await turn();
  assert.equal(w.calls, [], 'nothing answered while the move holds');
  // the move succeeded: the record went here, then the hold ended
  w.local.delete(ID);
  w.end();
  await done;
  assert.equal(w.calls, ['forwarded to host-b']);
});

test('a failed move: the request waits, then the server that stayed answers it', async () => {
  const w = setup();
  const done = w.send('POST', `/servers/${ID}/restore`);
  for (let i = 0; i < 5; i++) await turn();
  assert.equal(w.calls, []);
  w.end();
  await done;
  assert.equal(w.calls, ['answered here']);
});

test('another server is not held', async () => {
  const w = setup();
  w.local.add('srv_00bb');
  await w.send('DELETE', '/servers/srv_00bb');
  assert.equal(w.calls, ['answered here']);
});

test.run();
