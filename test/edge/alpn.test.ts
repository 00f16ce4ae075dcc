// HTTPS dispatch by ALPN, done by the edge itself: curl over TLS asking for h2 and for http/1.1
// reaches the same app through the one HTTPS listener, each on the protocol it asked for (the
// app sees the request either way; the lane answers http/1.1, an HTTP/2 session h2), and the
// edge's sources take the protocol from the handshake through public APIs only — not by taking
// node's own 'secureConnection' handler off the server or reading a TLS socket's `_parent`.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sitesOf, startEdge, DOMAIN, type TestEdge } from '../proxy/helpers.js';

const top = mkdtempSync(join(tmpdir(), 'rbx-edge-alpn-'));
let edge: TestEdge;
let app: Server;
const seen: string[] = [];

test.before(async () => {
  mkdirSync(join(top, 'app/root'), { recursive: true });
  writeFileSync(join(top, 'app/root/run.sh'), '#!/bin/sh\n');
  chmodSync(join(top, 'app/root/run.sh'), 0o755);
  app = createServer((req, res) => {
    seen.push(req.url ?? '');
    res.end(`app saw ${req.url} proto=${req.headers['x-forwarded-proto']}`);
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const port = (app.address() as AddressInfo).port;
  edge = await startEdge({
    sites: sitesOf([{ id: 'srv_app', slug: 'app', rootfs: join(top, 'app'), upstream: { host: '127.0.0.1', port }, neverSleep: false, suspended: false }]),
  });
});

test.after(async () => {
  await edge?.stop();
  await new Promise((r) => app?.close(r));
  rmSync(top, { recursive: true, force: true });
});

function curl(version: '--http2' | '--http1.1', path: string): Promise<{ body: string; code: string; proto: string }> {
  const host = `app.${DOMAIN}`;
  const args = ['-sS', '--max-time', '10', version, '--cacert', edge.caFile, '--resolve', `${host}:${edge.https}:127.0.0.1`];
  args.push('-w', '\n%{http_code} %{http_version}', `https://${host}:${edge.https}${path}`);
  return new Promise((resolve, reject) =>
    execFile('curl', args, (err, out, errOut) => {
      if (err) return reject(new Error(`curl ${version}: ${errOut || err.message}`));
      const i = out.lastIndexOf('\n');
      const [code, proto] = out.slice(i + 1).split(' ');
      resolve({ body: out.slice(0, i), code, proto });
    }),
  );
}

test('curl --http2 and --http1.1 over TLS both reach the app, each on the protocol the handshake chose', async () => {
  for (let i = 0; i < 3; i++) {
    const h2 = await curl('--http2', `/h2-${i}`);
    assert.is(h2.code, '200', h2.body);
    assert.is(h2.proto, '2');
    assert.is(h2.body, `app saw /h2-${i} proto=https`);
    const h1 = await curl('--http1.1', `/h1-${i}`);
    assert.is(h1.code, '200', h1.body);
    assert.is(h1.proto, '1.1');
    assert.is(h1.body, `app saw /h1-${i} proto=https`);
  }
  assert.equal(seen, ['/h2-0', '/h1-0', '/h2-1', '/h1-1', '/h2-2', '/h1-2']);
});

test("the edge dispatches by ALPN without node's internals (no listeners taken off a server, no TLS socket's _parent)", () => {
  const dir = new URL('../../src/edge/', import.meta.url).pathname;
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.ts'))) {
    const src = readFileSync(join(dir, f), 'utf8');
    assert.not.match(src, /_parent/, `${f} reads a TLS socket's _parent`);
    assert.not.match(src, /\.listeners\(\s*['"]secureConnection/, `${f} takes node's secureConnection handler`);
    assert.not.match(src, /createSecureServer/, `${f} leaves the ALPN dispatch to node's http2 secure server`);
  }
});

test.run();
