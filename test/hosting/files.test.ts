// /servers/{id}/files on a real daemon with real runc servers: a binary file written and read back
// byte-exact (type guessed, mode, parent directories made), Range, listing, delete, bad paths,
// symlinks planted in the server that point at the host's /etc/shadow or another server's files
// (only the server's own view is ever read), an upload over the disk ceiling (507, the server
// stays usable), a declared body over the limit (413) and a 50 MB tar round trip, plain and gzip;
// an archive bigger than the disk (507, nothing of it left, the space given back), a PUT under
// /proc (403 path_not_writable), and a listing of 30000 entries that reads no more of the
// server's output than the 10000 it returns.

import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ContainerRuntime } from '../../src/runtime/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { run } from '../helpers/run.js';
import { send } from '../http/contract.js';

const MB = 1024 * 1024;
let d: TestDaemon;
let rt: ContainerRuntime;
let id = '';
let id2 = '';
let key = '';
const work = mkdtempSync(join(tmpdir(), 'rbx-files-'));

test.before(async () => {
  d = await startTestDaemon({ hosting: { rateLimit: { perIpPerMinute: 6000, perKeyPerMinute: 6000 }, files: { maxBody: 400 * MB } } });
  if (!(d.daemon.runtime instanceof ContainerRuntime)) throw new Error('this file needs the runc runtime');
  rt = d.daemon.runtime;
  const created = await send(d.http, 'api.localhost', 'POST', '/create');
  assert.is(created.status, 200, created.text);
  ({ id, api_key: key } = created.json);
  const other = await send(d.http, 'api.localhost', 'POST', '/create', { from: '127.0.0.2' });
  assert.is(other.status, 200, other.text);
  id2 = other.json.id;
});
test.after(async () => {
  await d?.stop();
  rmSync(work, { recursive: true, force: true });
});

const auth = () => ({ authorization: `Bearer ${key}` });
const files = (method: string, q: string, o: { body?: Buffer | string; headers?: Record<string, string>; server?: string } = {}) =>
  send(d.http, 'api.localhost', method, `/servers/${o.server ?? id}/files${q}`, {
    headers: { ...auth(), 'content-type': 'application/octet-stream', ...o.headers },
    body: o.body,
  });
const exec = async (command: string) => {
  const r = await send(d.http, 'api.localhost', 'POST', `/servers/${id}/exec`, { headers: auth(), body: { command } });
  assert.is(r.status, 200, r.text);
  return r.json as { exit_code: number; stdout: string; stderr: string };
};
/** A request whose raw answer body is kept as bytes. */
function raw(
  method: string,
  path: string,
  body?: Buffer | NodeJS.ReadableStream,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: d.http, method, path, agent: false, headers: { host: 'api.localhost', ...auth(), ...headers } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
    });
    req.on('error', reject);
    if (body && !Buffer.isBuffer(body)) body.pipe(req);
    else req.end(body);
  });
}
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

test('a binary file is written (parent dirs made, mode) and read back byte-exact with a guessed type', async () => {
  const data = randomBytes(300_000);
  const w = await files('PUT', '?path=/root/deep/er/blob.png&mode=600', { body: data });
  assert.is(w.status, 200, w.text);
  assert.equal(w.json, { path: '/root/deep/er/blob.png', size: data.length });
  const r = await raw('GET', `/servers/${id}/files?path=/root/deep/er/blob.png`);
  assert.is(r.status, 200);
  assert.is(r.headers['content-type'], 'image/png');
  assert.is(sha(r.body), sha(data));
  assert.is((await exec('stat -c %a /root/deep/er/blob.png')).stdout, '600\n');
});

test('Range answers 206 with Content-Range; a suffix range; a range past the end is 416', async () => {
  const data = Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz');
  assert.is((await files('PUT', '?path=/root/r.txt', { body: data })).status, 200);
  const a = await raw('GET', `/servers/${id}/files?path=/root/r.txt`, undefined, { range: 'bytes=10-19' });
  assert.is(a.status, 206);
  assert.is(a.body.toString(), 'abcdefghij');
  assert.is(a.headers['content-range'], `bytes 10-19/${data.length}`);
  const b = await raw('GET', `/servers/${id}/files?path=/root/r.txt`, undefined, { range: 'bytes=-4' });
  assert.is(b.body.toString(), 'wxyz');
  const c = await raw('GET', `/servers/${id}/files?path=/root/r.txt`, undefined, { range: 'bytes=100-' });
  assert.is(c.status, 416);
  assert.is(c.headers['content-range'], `bytes */${data.length}`);
});

test('list gives names, types, sizes, modes and mtimes; delete removes; bad paths are 400, missing ones 404', async () => {
  await exec('mkdir -p /root/l/sub && printf 12345 > /root/l/five && chmod 640 /root/l/five && ln -s five /root/l/link');
  const l = await files('GET', '?path=/root/l&list=1');
  assert.is(l.status, 200, l.text);
  const by = Object.fromEntries(l.json.entries.map((e: { name: string }) => [e.name, e]));
  assert.equal(Object.keys(by).sort(), ['five', 'link', 'sub']);
  assert.is(by.five.type, 'file');
  assert.is(by.five.size, 5);
  assert.is(by.five.mode, '640');
  assert.is(by.sub.type, 'dir');
  assert.is(by.link.type, 'symlink');
  assert.ok(Math.abs(Date.parse(by.five.mtime) - Date.now()) < 120_000, by.five.mtime);
  assert.is((await files('DELETE', '?path=/root/l')).status, 200);
  const gone = await files('GET', '?path=/root/l/five');
  assert.is(gone.status, 404);
  assert.is(gone.json.error, 'file_not_found');
  // the documented 400 invalid_path on every files route, `..` written plainly as a curl user would
  for (const p of ['root/x', '/root/../etc/passwd', '/root/..', '/root/../etc']) {
    for (const [method, route] of [
      ['GET', ''],
      ['GET', '&list=1'],
      ['GET', '&archive=1'],
      ['PUT', ''],
      ['DELETE', ''],
      ['POST', 'archive'],
    ]) {
      const q = route === 'archive' ? `/archive?path=${p}` : `?path=${p}${route}`;
      const bad = await send(d.http, 'api.localhost', method, `/servers/${id}/files${q}`, {
        headers: { ...auth(), 'content-type': 'application/octet-stream' },
        body: method === 'PUT' || method === 'POST' ? 'x' : undefined,
      });
      assert.is(bad.status, 400, `${method} ${q}: ${bad.text}`);
      assert.is(bad.json.error, 'invalid_path', `${method} ${q}: ${bad.text}`);
    }
  }
  const dir = await files('GET', '?path=/root');
  assert.is(dir.status, 400);
  assert.is(dir.json.error, 'invalid_path');
});

test("symlinks to the host's /etc/shadow or to another server's files read only what the server itself has there", async () => {
  const other = rt.get(id2)!.rootfs;
  mkdirSync(join(other, 'root'), { recursive: true });
  writeFileSync(join(other, 'root', 'secret.txt'), 'other-server-secret\n');
  await exec(`ln -sf /etc/shadow /root/shadow && ln -sf ${other}/root/secret.txt /root/theirs && ln -sfn ${other}/root /root/theirdir`);
  const host = readFileSync('/etc/shadow');
  const own = await raw('GET', `/servers/${id}/files?path=/root/shadow`);
  assert.is(own.status, 200);
  assert.is(own.body.toString(), (await exec('cat /etc/shadow')).stdout, "the server's own /etc/shadow");
  assert.not.ok(own.body.equals(host), "never the host's");
  const theirs = await files('GET', '?path=/root/theirs');
  assert.is(theirs.status, 404, theirs.text);
  const viaDir = await files('GET', '?path=/root/theirdir/secret.txt');
  assert.is(viaDir.status, 404, viaDir.text);
  const w = await files('PUT', '?path=/root/theirdir/planted', { body: 'x' });
  assert.is(w.status, 400, 'the link leads nowhere inside the server: not a directory');
  assert.is(readFileSync(join(other, 'root', 'secret.txt'), 'utf8'), 'other-server-secret\n');
  assert.is((await run('ls', [join(other, 'root')])).stdout.includes('planted'), false, "nothing written into the other server's tree");
});

test('an upload over the disk ceiling fails with 507 disk_full, leaves no partial file, and the server stays usable', async () => {
  const size = 300 * MB; // the anonymous tier's disk is 256 MB
  let sent = 0;
  const { Readable } = await import('node:stream');
  const chunk = Buffer.alloc(MB, 7);
  const body = new Readable({
    read() {
      if (sent >= size) return void this.push(null);
      sent += chunk.length;
      this.push(chunk);
    },
  });
  const r = await raw('PUT', `/servers/${id}/files?path=/root/huge.bin`, body, { 'content-type': 'application/octet-stream', 'content-length': String(size) });
  assert.is(r.status, 507, r.body.toString());
  assert.is(JSON.parse(r.body.toString()).error, 'disk_full');
  const ls = await exec('ls -a /root');
  assert.not.ok(/huge\.bin/.test(ls.stdout), ls.stdout);
  assert.is((await files('PUT', '?path=/root/after.txt', { body: 'still fine' })).status, 200);
  assert.is((await exec('cat /root/after.txt')).stdout, 'still fine');
});

test('a body declared larger than hosting.files.maxBody is refused with 413 before it is read', async () => {
  const answer = await new Promise<string>((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port: d.http }, () =>
      s.write(`PUT /servers/${id}/files?path=/root/x HTTP/1.1\r\nHost: api.localhost\r\nAuthorization: Bearer ${key}\r\nContent-Length: ${500 * MB}\r\n\r\n`),
    );
    let got = '';
    s.on('data', (c) => {
      got += c;
      if (got.includes('\r\n\r\n')) {
        s.destroy();
        resolve(got);
      }
    });
    s.on('error', reject);
  });
  assert.match(answer, /^HTTP\/1\.1 413 /);
});

test('a file of a sleeping server is read (and Range too) without waking it; a path through a symlink wakes it and resolves inside', async () => {
  assert.is((await files('PUT', '?path=/root/asleep/note.txt', { body: 'read me while asleep' })).status, 200);
  await exec('ln -sfn /root/asleep /root/via');
  await rt.stop(id);
  assert.is(rt.get(id)?.state, 'sleeping');
  const r = await raw('GET', `/servers/${id}/files?path=/root/asleep/note.txt`);
  assert.is(r.status, 200);
  assert.is(r.body.toString(), 'read me while asleep');
  const part = await raw('GET', `/servers/${id}/files?path=/root/asleep/note.txt`, undefined, { range: 'bytes=0-3' });
  assert.is(part.status, 206);
  assert.is(part.body.toString(), 'read');
  assert.is(rt.get(id)?.state, 'sleeping', 'not woken');
  const via = await raw('GET', `/servers/${id}/files?path=/root/via/note.txt`);
  assert.is(via.body.toString(), 'read me while asleep');
  assert.is(rt.get(id)?.state, 'running', 'woken for the path through a symlink');
});

test('a 50 MB tar round-trips byte-exact, plain and gzipped', async () => {
  const src = join(work, 'src');
  mkdirSync(join(src, 'sub'), { recursive: true });
  const big = randomBytes(50 * MB);
  writeFileSync(join(src, 'big.bin'), big);
  writeFileSync(join(src, 'sub', 'small.txt'), 'hello\n');
  const tarFile = join(work, 'in.tar');
  assert.is((await run('tar', ['-C', src, '-cf', tarFile, '.'])).code, 0);
  const up = await raw('POST', `/servers/${id}/files/archive?path=/root/tree`, readFileSync(tarFile), { 'content-type': 'application/x-tar' });
  assert.is(up.status, 200, up.body.toString());
  assert.is((await exec('sha256sum /root/tree/big.bin')).stdout.split(' ')[0], sha(big));
  const down = await raw('GET', `/servers/${id}/files?path=/root/tree&archive=1`);
  assert.is(down.status, 200);
  assert.is(down.headers['content-type'], 'application/x-tar');
  const out = join(work, 'out');
  mkdirSync(out);
  writeFileSync(join(work, 'out.tar'), down.body);
  assert.is((await run('tar', ['-C', out, '-xf', join(work, 'out.tar')])).code, 0);
  assert.is(sha(readFileSync(join(out, 'big.bin'))), sha(big));
  assert.is(readFileSync(join(out, 'sub', 'small.txt'), 'utf8'), 'hello\n');
  const gz = join(work, 'in.tgz');
  assert.is((await run('tar', ['-C', join(src, 'sub'), '-czf', gz, '.'])).code, 0);
  const upz = await raw('POST', `/servers/${id}/files/archive?path=/root/gz`, readFileSync(gz));
  assert.is(upz.status, 200, upz.body.toString());
  const downz = await raw('GET', `/servers/${id}/files?path=/root/gz&archive=1&gzip=1`);
  assert.is(downz.headers['content-type'], 'application/gzip');
  writeFileSync(join(work, 'out.tgz'), downz.body);
  const list = await run('tar', ['-tzf', join(work, 'out.tgz')]);
  assert.ok(list.stdout.includes('./small.txt'), list.stdout);
  const junk = await raw('POST', `/servers/${id}/files/archive?path=/root/junk`, Buffer.from('this is not a tar archive at all'.repeat(40)));
  assert.is(junk.status, 400, junk.body.toString());
  assert.is(JSON.parse(junk.body.toString()).error, 'invalid_archive');
});

test('an archive bigger than the disk answers 507 disk_full and leaves nothing of itself: the space is given back', async () => {
  const src = join(work, 'huge');
  mkdirSync(src);
  writeFileSync(join(src, 'first.txt'), 'written before the disk filled\n');
  writeFileSync(join(src, 'zeros.bin'), Buffer.alloc(0));
  assert.is((await run('truncate', ['-s', '300M', join(src, 'zeros.bin')])).code, 0); // the anonymous tier's disk is 256 MB
  const tgz = join(work, 'huge.tgz');
  assert.is((await run('tar', ['-C', src, '-czf', tgz, 'first.txt', 'zeros.bin'])).code, 0);
  const used = async () => Number((await exec('df -k --output=used / | tail -n 1')).stdout.trim());
  await exec('mkdir -p /root/dest && echo kept > /root/dest/old.txt');
  const before = await used();
  const r = await raw('POST', `/servers/${id}/files/archive?path=/root/dest`, readFileSync(tgz));
  assert.is(r.status, 507, r.body.toString());
  assert.is(JSON.parse(r.body.toString()).error, 'disk_full');
  const after = await used();
  assert.ok(after - before < 2048, `used ${before} KiB before, ${after} KiB after`);
  assert.is((await exec('ls -A /root/dest')).stdout, 'old.txt\n', 'only what was there before');
  assert.is((await exec('cat /root/dest/old.txt')).stdout, 'kept\n');
});

test('an archive unpacked at / with a file under another mount (/dev/shm) lands there too', async () => {
  const src = join(work, 'mounts');
  mkdirSync(join(src, 'dev', 'shm'), { recursive: true });
  mkdirSync(join(src, 'root'), { recursive: true });
  writeFileSync(join(src, 'dev', 'shm', 'across.txt'), 'on the tmpfs\n');
  writeFileSync(join(src, 'root', 'here.txt'), 'on the disk\n');
  const tarFile = join(work, 'mounts.tar');
  assert.is((await run('tar', ['-C', src, '-cf', tarFile, './dev/shm/across.txt', './root/here.txt'])).code, 0);
  const r = await raw('POST', `/servers/${id}/files/archive?path=/`, readFileSync(tarFile), { 'content-type': 'application/x-tar' });
  assert.is(r.status, 200, r.body.toString());
  assert.is((await exec('cat /dev/shm/across.txt /root/here.txt')).stdout, 'on the tmpfs\non the disk\n');
  assert.is((await exec('ls -A / | grep -c rbx-unpack || true')).stdout.trim(), '0', 'no scratch directory left');
});

test('a PUT where nothing may be written (/proc/sys) is 403 path_not_writable with a clear detail, not 507', async () => {
  for (const path of ['/proc/sys/kernel/hostname', '/sys/kernel/newfile']) {
    const r = await files('PUT', `?path=${path}`, { body: 'x' });
    assert.is(r.status, 403, `${path}: ${r.text}`);
    assert.is(r.json.error, 'path_not_writable');
    assert.match(r.json.detail, /nothing can be written at \/(proc|sys)\/.*read-only or a kernel file system/);
  }
});

test('a listing of 30000 entries returns 10000 (truncated) and reads no more output than those', async () => {
  const n = 30_000;
  const long = 'n'.repeat(100);
  // hard links of one file: 30000 names without 30000 inodes (the disk has about 16000)
  const made = await exec(
    `mkdir -p /root/many && cd /root/many && python3 -c 'import os\nopen("${long}", "w").close()\nfor i in range(1, ${n}): os.link("${long}", "${long}%d" % i)' && ls -f | wc -l`,
  );
  assert.is(Number(made.stdout.trim()), n + 2, made.stderr.slice(-300));
  const exec0 = rt.exec.bind(rt);
  let read = 0;
  rt.exec = (sid, opts) => {
    const p = exec0(sid, opts);
    if (opts.argv.some((a) => a.includes('find .'))) p.stdout.on('data', (b: Buffer) => (read += b.length));
    return p;
  };
  try {
    const l = await files('GET', '?path=/root/many&list=1');
    assert.is(l.status, 200, l.text.slice(0, 300));
    assert.is(l.json.entries.length, 10_000);
    assert.is(l.json.truncated, true);
  } finally {
    rt.exec = exec0;
    await exec('rm -rf /root/many');
  }
  const perEntry = 105 + 5 + 20; // name, the other four fields with their NULs
  assert.ok(read <= 10_001 * perEntry + 256 * 1024, `${read} bytes of output read for 10000 entries (all ${n}: about ${n * perEntry})`);
});

test.run();
