// The channel's own header names (src/channel/wire.ts), built from its one prefix: the names a
// peer of another version sends and expects, pinned here so a change of how they are written
// cannot change the wire; and a client's own names under that prefix never cross.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { answerHeaders, channelHeaders, CLIENT_PORT, CONTACT_ASK, dropOwn, H, PREFIX, REGISTRY_AGO, SSH_KIND } from '../../src/channel/wire.js';

test('every header name is the one on the wire', () => {
  assert.is(PREFIX, 'x-rootbox-');
  assert.equal(
    { ...H },
    {
      hops: 'x-rootbox-hops',
      ip: 'x-rootbox-client-ip',
      scheme: 'x-rootbox-scheme',
      rid: 'x-request-id',
      server: 'x-rootbox-server',
      epoch: 'x-rootbox-epoch',
      site: 'x-rootbox-site',
      alias: 'x-rootbox-alias',
      upgrade: 'x-rootbox-upgrade',
      raw: 'x-rootbox-raw',
      api: 'x-rootbox-api',
      counted: 'x-rootbox-counted',
      notHere: 'x-rootbox-not-here',
      fullPath: 'x-rootbox-full-path',
    },
  );
  assert.equal([CONTACT_ASK, REGISTRY_AGO, SSH_KIND, CLIENT_PORT], ['x-rootbox-contact', 'x-rootbox-registry-ago', 'x-rootbox-kind', 'x-rootbox-client-port']);
});

test("a client's own names under the prefix never cross", () => {
  const head = { ':path': '/', host: 'a.example', accept: '*/*', [H.server]: 'srv_x', [H.hops]: '0', [H.rid]: 'rid-1' };
  assert.equal(channelHeaders(head), { accept: '*/*', 'x-request-id': 'rid-1' });
  assert.equal(answerHeaders({ ':status': 200, 'content-type': 'text/plain', [H.notHere]: '1' } as never), { 'content-type': 'text/plain' });
  const req = { headers: { accept: '*/*', [H.site]: 'a.example' }, rawHeaders: ['Accept', '*/*', 'X-Rootbox-Site', 'a.example'] };
  dropOwn(req);
  assert.equal(req, { headers: { accept: '*/*' }, rawHeaders: ['Accept', '*/*'] });
});

test.run();
