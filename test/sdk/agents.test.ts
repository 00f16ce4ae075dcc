// rootbox/agents (sdk/js/src/agents.ts), the OpenAI Agents SDK sandbox provider, against a real
// daemon with real runc servers, through the provider's public interface and without any LLM
// call: the contract the E2B and Daytona providers of @openai/agents-extensions 0.18 keep —
// create with a manifest, exec (output, exit code, workdir, environment), a terminal session
// (tty: true) that streams output and takes stdin, write then read a file (and patch one),
// expose a port and fetch its URL, persist the workspace through a checkpoint then hydrate it
// into the same sandbox (restore) and into a new one (fork), and as a tar (workspacePersistence
// 'tar', and the fallback on a host without checkpoints),
// serialize and resume, pause (close with pauseOnExit leaves the server) and kill.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Manifest, RootboxSandboxClient, type RootboxSandboxSession } from '../../sdk/js/src/agents.js';
import { RootboxError } from '../../sdk/js/src/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let client: RootboxSandboxClient;
let box: RootboxSandboxSession;
const text = (b: string | Uint8Array) => (typeof b === 'string' ? b : Buffer.from(b).toString('utf8'));
const manifest = () =>
  new Manifest({
    root: '/workspace',
    entries: {
      'README.md': { type: 'file', content: 'hello from the manifest\n' },
      src: { type: 'dir', children: { 'a.txt': { type: 'file', content: 'a' } } },
    },
    environment: { GREETING: 'hi there' },
  });

test.before(async () => {
  d = await startTestDaemon({ hosting: { anonServersPerIp: 10, rateLimit: { createsPerIpPerHour: 1000 } } });
  if (!d.containers) throw new Error('this file needs the runc runtime');
  client = new RootboxSandboxClient({ baseUrl: `http://api.localhost:${d.http}` });
});
test.after(async () => {
  client?.rootbox.close();
  await d?.stop();
});

test('create: a server with the manifest written under its root', async () => {
  box = await client.create({ manifest: manifest() });
  assert.is(client.backendId, 'rootbox');
  assert.match(box.state.serverId, /^srv_/);
  assert.is(box.state.workspaceReady, true);
  assert.is(text(await box.readFile({ path: 'README.md' })), 'hello from the manifest\n');
  assert.is(text(await box.readFile({ path: '/workspace/src/a.txt' })), 'a');
  assert.equal((await box.listDir({ path: '.' })).map((e) => [e.name, e.type]).sort(), [
    ['README.md', 'file'],
    ['src', 'dir'],
  ]);
  assert.is(await box.pathExists('src/a.txt'), true);
  assert.is(await box.directoryExists('src'), true);
  assert.is(await box.pathExists('nope'), false);
  assert.is(await box.running(), true);
});

test('exec: output, exit code, the root as working directory, the manifest environment', async () => {
  const r = await box.exec({ cmd: 'pwd; echo "$GREETING"; echo oops >&2; exit 3' });
  assert.is(r.exitCode, 3);
  assert.is(r.stdout, '/workspace\nhi there\n');
  assert.is(r.stderr, 'oops\n');
  assert.is(r.output, '/workspace\nhi there\n\noops\n');
  const s = await box.execCommand({ cmd: 'pwd', workdir: 'src' });
  assert.match(s, /Process exited with code 0/);
  assert.match(s, /\/workspace\/src/);
  assert.is((await box.exec({ cmd: 'echo $0', shell: '/bin/bash' })).stdout, '/bin/bash\n');
});

test('tty: a command on a terminal inside the server streams its output and takes stdin', async () => {
  assert.is(box.supportsPty(), true);
  const first = await box.execCommand({ cmd: 'test -t 0 && echo on-a-tty; read line; echo "got $line"; exit 7', tty: true, yieldTimeMs: 3000 });
  assert.match(first, /on-a-tty/);
  assert.not.match(first, /Process exited/, first);
  const id = Number(/Process running with session ID (\d+)/.exec(first)?.[1]);
  assert.ok(id > 0, first);
  const second = await box.writeStdin({ sessionId: id, chars: 'ping\n', yieldTimeMs: 5000 });
  assert.match(second, /got ping/);
  assert.match(second, /Process exited with code 7/);
  assert.match(await box.writeStdin({ sessionId: id, chars: '' }), /session not found/);
});

test('write then read a file, and expose a port whose URL answers', async () => {
  await box.materializeEntry({ path: 'www/index.html', entry: { type: 'file', content: '<p>served by an agent</p>\n' } });
  assert.is(text(await box.readFile({ path: 'www/index.html' })), '<p>served by an agent</p>\n');
  assert.is(text(await box.readFile({ path: 'www/index.html', maxBytes: 3 })), '<p>');
  // the apply_patch editor (V4A diffs), as the filesystem capability uses it
  const editor = box.createEditor();
  await editor.createFile({ type: 'create_file', path: 'notes/todo.md', diff: '+one\n+two\n' });
  assert.is(text(await box.readFile({ path: 'notes/todo.md' })), 'one\ntwo'); // applyDiff's own output
  await editor.updateFile({ type: 'update_file', path: 'notes/todo.md', diff: '@@\n one\n-two\n+three\n' });
  assert.is(text(await box.readFile({ path: 'notes/todo.md' })), 'one\nthree');
  await editor.deleteFile({ type: 'delete_file', path: 'notes/todo.md' });
  assert.is(await box.pathExists('notes/todo.md'), false);
  // a long-running server on a terminal session, as an agent starts one
  const started = await box.execCommand({ cmd: 'python3 -m http.server 8000 --directory www', tty: true, yieldTimeMs: 1000 });
  assert.match(started, /session ID/, started);
  const endpoint = await box.resolveExposedPort(8000);
  assert.is(endpoint.tls, false);
  assert.ok(endpoint.port > 0 && endpoint.port !== 8000, JSON.stringify(endpoint));
  assert.equal(await box.resolveExposedPort(8000), endpoint); // recorded in the state
  let body = '';
  for (let i = 0; i < 50 && !body.includes('served by an agent'); i++) {
    body = await fetch(`http://${endpoint.host === '0.0.0.0' ? '127.0.0.1' : endpoint.host}:${endpoint.port}/`).then(
      (r) => r.text(),
      () => '',
    );
    if (!body.includes('served by an agent')) await new Promise((r) => setTimeout(r, 200));
  }
  assert.is(body, '<p>served by an agent</p>\n');
  // port 80 is the server's own address (its subdomain)
  const web = await box.resolveExposedPort(80);
  assert.is(web.host, `${box.server.subdomain}`);
  assert.is(web.port, d.http);
});

/** box's manual checkpoints (an automatic one may come on the interval). */
const manual = async () => (await box.server.checkpoints()).filter((c) => c.kind === 'manual');

test('persist through a checkpoint: hydrating it into the same sandbox restores it, into a new one forks it', async () => {
  await box.exec({ cmd: 'mkdir -p deep/er && printf "bytes\\0here" > deep/er/bin && chmod 750 deep/er/bin' });
  const saved = await box.persistWorkspace();
  // a short reference to a checkpoint of the server, not the files
  assert.ok(saved.byteLength < 512, String(saved.byteLength));
  const [cp] = await manual();
  assert.match(text(saved), new RegExp(cp.id));
  // the same sandbox: changes since are undone (the checkpoint restored)
  await box.exec({ cmd: 'echo changed > README.md' });
  await box.exec({ cmd: 'echo later > later.txt' });
  await box.hydrateWorkspace(saved);
  assert.is(box.state.serverId, box.server.id);
  assert.is(text(await box.readFile({ path: 'README.md' })), 'hello from the manifest\n');
  assert.is(await box.pathExists('later.txt'), false);
  // a new sandbox: it moves onto a fork of the checkpoint, and its own server is deleted
  const other = await client.create({ manifest: new Manifest({ root: '/workspace', entries: { 'stale.txt': { type: 'file', content: 'old' } } }) });
  const own = other.state.serverId;
  try {
    assert.is.not(own, box.state.serverId);
    await other.hydrateWorkspace(saved);
    assert.is.not(other.state.serverId, own);
    assert.is.not(other.state.serverId, box.state.serverId);
    assert.is(other.server.id, other.state.serverId);
    assert.is(other.state.slug, other.server.subdomain);
    assert.is(text(await other.readFile({ path: 'README.md' })), 'hello from the manifest\n');
    assert.is(text(await other.readFile({ path: 'www/index.html' })), '<p>served by an agent</p>\n');
    assert.equal([...(await other.readFile({ path: 'deep/er/bin' }))], [...Buffer.from('bytes\0here')]);
    assert.is((await other.exec({ cmd: 'stat -c %a deep/er/bin' })).stdout, '750\n');
    assert.is(await other.pathExists('stale.txt'), false);
    const gone = await client.rootbox.servers.get(own).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.is((gone as RootboxError).code, 'server_not_found');
    // the fork is independent of the sandbox it came from
    await other.exec({ cmd: 'echo fork > README.md' });
    assert.is(text(await box.readFile({ path: 'README.md' })), 'hello from the manifest\n');
  } finally {
    await other.delete();
  }
  await box.server.deleteCheckpoint(cp.id);
});

test("workspacePersistence 'tar', and a host without checkpoints, persist a tar that hydrates into a new sandbox", async () => {
  const tarClient = new RootboxSandboxClient({ rootbox: client.rootbox, workspacePersistence: 'tar' });
  const tarBox = await tarClient.connect(box.state.serverId, new Manifest({ root: '/workspace' }), { workspacePersistence: 'tar' });
  const tar = await tarBox.persistWorkspace();
  assert.ok(tar.byteLength > 1024);
  assert.is((await manual()).length, 0);
  // a host whose runtime cannot copy disks answers 503 not_configured: the default falls back to the tar
  const rt = d.daemon.runtime as unknown as Record<string, unknown>;
  rt.captureDisk = undefined;
  let fallback: Uint8Array;
  try {
    fallback = await box.persistWorkspace();
  } finally {
    delete rt.captureDisk;
  }
  assert.ok(fallback.byteLength > 1024);
  assert.is((await manual()).length, 0);
  for (const data of [tar, fallback]) {
    const other = await client.create({ manifest: new Manifest({ root: '/workspace', entries: { 'stale.txt': { type: 'file', content: 'old' } } }) });
    const own = other.state.serverId;
    try {
      await other.hydrateWorkspace(data);
      assert.is(other.state.serverId, own);
      assert.is(text(await other.readFile({ path: 'README.md' })), 'hello from the manifest\n');
      assert.equal([...(await other.readFile({ path: 'deep/er/bin' }))], [...Buffer.from('bytes\0here')]);
      assert.is((await other.exec({ cmd: 'stat -c %a deep/er/bin' })).stdout, '750\n');
      assert.is(await other.pathExists('stale.txt'), false);
    } finally {
      await other.delete();
    }
  }
});

test('serialize, deserialize and resume: the same server, its workspace and environment; connect by id', async () => {
  const saved = JSON.parse(JSON.stringify(await client.serializeSessionState(box.state))) as Record<string, unknown>;
  assert.is(saved.serverId, box.state.serverId);
  assert.not.match(JSON.stringify(saved), /rbx_/); // the API key is the client's, never in the state
  const state = await client.deserializeSessionState(saved);
  assert.is(state.manifest.root, '/workspace');
  const again = await client.resume(state);
  assert.is(again.state.serverId, box.state.serverId);
  const r = await again.exec({ cmd: 'cat README.md; echo "$GREETING"' });
  assert.is(r.stdout, 'hello from the manifest\nhi there\n');
  assert.ok(again.state.exposedPorts?.['8000'], JSON.stringify(again.state.exposedPorts));
  // connect: a session on an existing server of the account, by id
  const connected = await client.connect(box.state.serverId, new Manifest({ root: '/workspace' }));
  assert.is((await connected.exec({ cmd: 'cat src/a.txt' })).stdout, 'a');
});

test('pause (close with pauseOnExit) leaves the server; kill deletes it; a deleted server resumes as a new one', async () => {
  box.state.pauseOnExit = true;
  assert.is(client.canPersistOwnedSessionState(box.state), true);
  await box.close();
  assert.is((await client.rootbox.servers.get(box.state.serverId)).id, box.state.serverId);
  await box.delete({ reason: 'cleanup', preserveOwnedSessions: true });
  assert.is((await client.rootbox.servers.get(box.state.serverId)).id, box.state.serverId);
  await box.delete();
  const gone = await client.rootbox.servers.get(box.state.serverId).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.instance(gone, RootboxError);
  assert.is((gone as RootboxError).code, 'server_not_found');
  // resuming a session whose server is gone makes a new one from its manifest
  const fresh = await client.resume(box.state);
  try {
    assert.is.not(fresh.state.serverId, box.state.serverId);
    assert.is(text(await fresh.readFile({ path: 'README.md' })), 'hello from the manifest\n');
  } finally {
    await fresh.delete();
  }
});

test.run();
