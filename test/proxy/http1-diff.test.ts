// Differential checks of the proxy's hand-written HTTP/1.1 response reader (src/proxy/http1.ts)
// against node's own client parser (llhttp, through the public http.request API): streams the
// reader once read differently, each a fixed defect. Both must agree on refusing or accepting,
// the status, the headers passed on, the body bytes, where the message ends and whether the
// connection may be reused.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { differ } from './http1-compare.js';
import { runLlhttp, runReader, type Outcome, type ReaderOutcome } from './http1-run.js';

/** JSON with everything outside printable ASCII escaped (a NBSP must not look like a space). */
const esc = (x: unknown) => JSON.stringify(Buffer.isBuffer(x) ? x.toString('latin1') : x).replace(/[\x7f-\xff]/g, (c) => `\\x${c.charCodeAt(0).toString(16)}`);
const show = (o: Outcome) => esc({ ...o, body: o.body.length > 200 ? `${o.body.length} bytes` : o.body.toString('latin1') });

/** One stream read by both (the reader cut a byte at a time, and where llhttp ends); fails unless they agree. */
async function agree(stream: string, head = false): Promise<ReaderOutcome> {
  const bytes = Buffer.from(stream, 'latin1');
  const L = await runLlhttp(bytes, head);
  const R = runReader(bytes, head, [...Array.from({ length: bytes.length }, (_, i) => i), ...(L.end ? [L.end] : [])].sort((a, b) => a - b));
  const why = differ(L, R);
  assert.is(why, undefined, `${why}: ${esc(stream)}\n  llhttp: ${show(L)}\n  reader: ${show(R)}`);
  return R;
}

// --- streams the reader once read differently -------------------------------------------------

const refused = async (stream: string) => assert.ok((await agree(stream)).error, esc(stream));

test('a length or coding beside a VT, FF or NBSP is refused, and an NBSP at the edge of a value is kept (String.trim took them for whitespace)', async () => {
  await refused('HTTP/1.1 200 OK\r\nContent-Length: \x0b5\r\n\r\nhello');
  await refused('HTTP/1.1 200 OK\r\nContent-Length: 5\xa0\r\n\r\nhello');
  await refused('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\x0c\r\n\r\n0\r\n\r\n');
  assert.equal((await agree('HTTP/1.1 200 OK\r\nX-A: \xa0v\xa0\r\nContent-Length: 0\r\n\r\n')).headers, ['X-A', '\xa0v\xa0', 'Content-Length', '0']);
});

test('a bare CR or LF or another control byte is refused in every header, also in those not passed on and in interim answers', async () => {
  // a parser that ends lines at a bare CR sees a Transfer-Encoding here, and reads the body as chunked
  await refused('HTTP/1.1 200 OK\r\nKeep-Alive: a\rTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello');
  await refused('HTTP/1.1 200 OK\r\nConnection: x-a\nContent-Length: 9\r\nContent-Length: 5\r\n\r\nhello');
  await refused('HTTP/1.1 200 OK\r\nUpgrade: \x00\r\nContent-Length: 0\r\n\r\n');
  await refused('HTTP/1.1 103 Early Hints\r\nLink: \x7f\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n');
});

test('trailer fields are checked like header fields: a bare LF cannot hide the next answer in them', async () => {
  // read as trailers, the second answer was swallowed; a parser ending lines at LF serves it
  await refused('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX: a\n\nHTTP/1.1 302 Found\r\nLocation: /evil\r\n\r\n');
  await refused('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nno colon here\r\n\r\n');
  await refused('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: a\rb\r\n\r\n');
  assert.is((await agree('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 1\r\n\r\n')).reusable, true);
});

test('a HEAD answer without a length or chunked coding is not reused: an app answering HEAD like GET sends a body up to the close', async () => {
  const gotBody = await agree('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody as for a GET', true);
  assert.is(gotBody.reusable, false);
  assert.is(gotBody.body.length, 0);
  assert.is((await agree('HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n', true)).reusable, false);
  assert.is((await agree('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n', true)).reusable, true);
  assert.is((await agree('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', true)).reusable, true);
  assert.is((await agree('HTTP/1.1 204 No Content\r\n\r\n', true)).reusable, true);
});

test('the 64 KiB head and 4 KiB chunk-line limits hold however the answer is cut into reads', () => {
  const every = (b: Buffer) => Array.from({ length: b.length }, (_, i) => i);
  const longLine = Buffer.from(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;${'e'.repeat(5000)}\r\nx\r\n0\r\n\r\n`, 'latin1');
  assert.match(runReader(longLine, false, []).error ?? 'read', /chunk line too long/); // in one read it passed
  assert.match(runReader(longLine, false, every(longLine)).error ?? 'read', /chunk line too long/);
  const status = 'HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Fill: ';
  const fullHead = Buffer.from(`${status}${'f'.repeat(64 * 1024 - status.length)}\r\n\r\n`, 'latin1');
  assert.is(runReader(fullHead, false, []).error, undefined);
  // cut before the last LF: the 64 KiB held with CRLFCR were refused as too large
  assert.is(runReader(fullHead, false, [fullHead.length - 1]).error, undefined);
  const overHead = Buffer.from(`${status}${'f'.repeat(64 * 1024 - status.length + 1)}\r\n\r\n`, 'latin1');
  assert.match(runReader(overHead, false, []).error ?? 'read', /too large/);
  assert.match(runReader(overHead, false, [overHead.length - 1]).error ?? 'read', /too large/);
});

test.run();
