// An agent's whole session over MCP with the official SDK client against a daemon running real
// runc servers: create a server, write a script with write_file, run it with exec, read what it
// wrote with read_file (text and base64, an offset, an empty file), list the directory, see a
// failing command and a missing file as tool errors with the API's codes, and delete the server.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
const clients: Client[] = [];

test.before(async () => {
  d = await startTestDaemon({ publicIp: '127.0.0.1' });
});
test.after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  await d?.stop();
});

async function connect(key?: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(
    new URL(`http://api.localhost:${d.http}/mcp`),
    key ? { requestInit: { headers: { authorization: `Bearer ${key}` } } } : {},
  );
  const client = new Client({ name: 'agent', version: '1.0.0' });
  await client.connect(transport);
  clients.push(client);
  return client;
}
type Text = { type: string; text: string };
const out = (r: object) => JSON.parse((r as { content: Text[] }).content[0].text) as Record<string, any>;
const ok = (r: object) => {
  assert.not.ok((r as { isError?: boolean }).isError, (r as { content: Text[] }).content[0].text);
  return out(r);
};

test('an agent creates a server, writes a script, runs it, reads its output and deletes the server, all over MCP', async () => {
  const created = ok(await (await connect()).callTool({ name: 'create_server', arguments: {} }));
  const c = await connect(created.api_key);
  const id = created.id as string;

  const script = '#!/bin/sh\nuname -s > /root/out/kernel.txt\nprintf "\\000\\001\\377" > /root/out/bytes.bin\n: > /root/out/empty\n';
  const w = ok(await c.callTool({ name: 'write_file', arguments: { id, path: '/root/job/run.sh', content: script, mode: '755' } }));
  assert.equal(w, { path: '/root/job/run.sh', size: Buffer.byteLength(script) });

  const ran = ok(await c.callTool({ name: 'exec', arguments: { id, command: 'mkdir -p /root/out && /root/job/run.sh && echo done' } }));
  assert.is(ran.exit_code, 0, ran.stderr);
  assert.is(ran.stdout, 'done\n');

  const kernel = ok(await c.callTool({ name: 'read_file', arguments: { id, path: '/root/out/kernel.txt' } }));
  assert.is(kernel.content, 'Linux\n');
  assert.is(kernel.size, 6);
  assert.is(kernel.more, false);
  const part = ok(await c.callTool({ name: 'read_file', arguments: { id, path: '/root/out/kernel.txt', offset: 2, length: 3 } }));
  assert.equal([part.content, part.more], ['nux', true]);
  const bytes = ok(await c.callTool({ name: 'read_file', arguments: { id, path: '/root/out/bytes.bin', encoding: 'base64' } }));
  assert.equal([...Buffer.from(bytes.content, 'base64')], [0, 1, 255]);
  const empty = ok(await c.callTool({ name: 'read_file', arguments: { id, path: '/root/out/empty' } }));
  assert.equal([empty.content, empty.size], ['', 0]);

  const listed = ok(await c.callTool({ name: 'list_files', arguments: { id, path: '/root/out' } }));
  assert.equal(
    listed.entries.map((e: { name: string; type: string; size: number }) => [e.name, e.type, e.size]),
    [
      ['bytes.bin', 'file', 3],
      ['empty', 'file', 0],
      ['kernel.txt', 'file', 6],
    ],
  );

  const failed = ok(await c.callTool({ name: 'exec', arguments: { id, command: ['sh', '-c', 'echo nope >&2; exit 3'] } }));
  assert.equal([failed.exit_code, failed.stderr], [3, 'nope\n']);
  const missing = await c.callTool({ name: 'read_file', arguments: { id, path: '/root/out/none' } });
  assert.ok(missing.isError);
  assert.is(out(missing).error, 'file_not_found');
  const outside = await c.callTool({ name: 'write_file', arguments: { id, path: 'relative/path', content: 'x' } });
  assert.ok(outside.isError);
  assert.is(out(outside).error, 'invalid_path', 'a relative path is the documented invalid_path');

  ok(await c.callTool({ name: 'delete_server', arguments: { id } }));
  const gone = await c.callTool({ name: 'exec', arguments: { id, command: 'true' } });
  assert.ok(gone.isError);
  assert.is(out(gone).error, 'server_not_found');
});

test.run();
