// The lean fetch (src/net) against real local HTTP servers: it answers like the global fetch where
// our clients (openai, viem, the facilitator client) look — status, headers, body, redirects,
// abort and connection failures — and reuses one kept-alive connection for a series of calls.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { leanFetch } from '../../src/net/index.js';

type Handler = (req: IncomingMessage, body: string, res: ServerResponse) => void;

async function server(handler: Handler) {
  const sockets = new Set<unknown>();
  const s = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => handler(req, body, res));
  });
  s.on('connection', (c) => sockets.add(c));
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => sockets.size,
    close: () => new Promise<void>((r) => (s.closeAllConnections(), s.close(() => r()))),
  };
}

test('a POST sends its body and headers and reads status, headers and JSON like fetch', async () => {
  const s = await server((req, body, res) =>
    res.writeHead(201, { 'content-type': 'application/json', 'x-seen': `${req.method} ${req.headers['content-type']} ${req.headers.authorization}` }).end(body),
  );
  try {
    const init = { method: 'POST', headers: new Headers({ 'content-type': 'application/json', authorization: 'Bearer k' }), body: '{"a":"ü"}' };
    const [mine, theirs] = [await leanFetch(`${s.url}/x`, init), await fetch(`${s.url}/x`, init)];
    for (const r of [mine, theirs]) {
      assert.is(r.status, 201);
      assert.is(r.ok, true);
      assert.is(r.headers.get('x-seen'), 'POST application/json Bearer k');
      assert.equal(await r.json(), { a: 'ü' });
    }
    assert.is(mine.url, `${s.url}/x`);
  } finally {
    await s.close();
  }
});

test('a series of calls reuses one kept-alive connection', async () => {
  const s = await server((_q, _b, res) => res.end('ok'));
  try {
    for (let i = 0; i < 5; i++) assert.is(await (await leanFetch(s.url)).text(), 'ok');
    assert.is(s.connections(), 1);
  } finally {
    await s.close();
  }
});

test('redirects are followed: 307 keeps method and body, 303 and 302 after POST become GET', async () => {
  const s = await server((req, body, res) => {
    if (req.url === '/307') return res.writeHead(307, { location: '/echo' }).end();
    if (req.url === '/303') return res.writeHead(303, { location: '/echo' }).end();
    if (req.url === '/302') return res.writeHead(302, { location: `/echo` }).end();
    res.end(`${req.method} ${body}`);
  });
  try {
    const post = (p: string) => leanFetch(`${s.url}${p}`, { method: 'POST', body: 'b', headers: { 'content-type': 'text/plain' } });
    const r = await post('/307');
    assert.is(await r.text(), 'POST b');
    assert.is(r.redirected, true);
    assert.is(r.url, `${s.url}/echo`);
    assert.is(await (await post('/303')).text(), 'GET ');
    assert.is(await (await post('/302')).text(), 'GET ');
  } finally {
    await s.close();
  }
});

test('an aborted request rejects with the signal reason, as fetch does', async () => {
  const s = await server(() => {}); // never answers
  try {
    const signal = AbortSignal.timeout(50);
    const e = await leanFetch(s.url, { signal }).then(
      () => undefined,
      (x: Error) => x,
    );
    assert.ok(e);
    assert.is(e!.name, 'TimeoutError');
    const c = new AbortController();
    c.abort();
    const e2 = await leanFetch(s.url, { signal: c.signal }).catch((x: Error) => x);
    assert.is((e2 as Error).name, 'AbortError');
  } finally {
    await s.close();
  }
});

test('a refused connection is TypeError "fetch failed" with the cause', async () => {
  const s = await server(() => {});
  const url = s.url;
  await s.close();
  const e = (await leanFetch(url).catch((x) => x)) as TypeError & { cause?: { code?: string } };
  assert.instance(e, TypeError);
  assert.is(e.message, 'fetch failed');
  assert.is(e.cause?.code, 'ECONNREFUSED');
});

test('a gzip answer is decoded and 204 has no body', async () => {
  const s = await server((req, _b, res) => {
    if (req.url === '/204') return res.writeHead(204).end();
    res.writeHead(500, { 'content-encoding': 'gzip', 'content-type': 'application/json' }).end(gzipSync('{"error":"x"}'));
  });
  try {
    const r = await leanFetch(s.url);
    assert.is(r.status, 500);
    assert.is(r.ok, false);
    assert.equal(await r.json(), { error: 'x' });
    const n = await leanFetch(`${s.url}/204`);
    assert.is(n.status, 204);
    assert.is(await n.text(), '');
  } finally {
    await s.close();
  }
});

test('the body is read once whichever way (text, json, bytes, the body stream), clone gives a second read, as with fetch', async () => {
  const s = await server((_req, _b, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('\ufeff{"a":"ü"}'));
  try {
    const both = async () => [await leanFetch(s.url), await fetch(s.url)];
    for (const r of await both()) {
      const c = r.clone();
      assert.is(r.bodyUsed, false);
      assert.equal(await r.json(), { a: 'ü' });
      assert.is(r.bodyUsed, true);
      await r.text().then(
        () => assert.unreachable('read twice'),
        (e) => assert.instance(e, TypeError),
      );
      assert.is(new TextDecoder().decode(await c.arrayBuffer()), '{"a":"ü"}');
    }
    for (const r of await both()) {
      const reader = r.body!.getReader();
      const chunks: Uint8Array[] = [];
      for (let x = await reader.read(); !x.done; x = await reader.read()) chunks.push(x.value);
      assert.is(Buffer.concat(chunks).toString(), '\ufeff{"a":"ü"}');
      assert.is(r.bodyUsed, true);
      await r.text().then(
        () => assert.unreachable('read twice'),
        (e) => assert.instance(e, TypeError),
      );
    }
    for (const r of await both()) {
      assert.is((await r.bytes()).length, 13);
      assert.is(r.body === null || r.bodyUsed, true);
    }
  } finally {
    await s.close();
  }
});

test.run();
