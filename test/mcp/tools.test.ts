// rootbox as an MCP server, driven by the official SDK's client (Client +
// StreamableHTTPClientTransport) over a real daemon: the tools a caller is offered with and
// without an api_key, their input schemas taken from the routes, tool calls that answer what the
// route answers (errors as isError with {error, detail}), and a wrong key refused at the transport.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
const open: Client[] = [];

test.before(async () => {
  d = await startTestDaemon({ hosting: { rateLimit: { perIpPerMinute: 600, createsPerIpPerHour: 40 }, anonServersPerIp: 20 } });
});
test.after(async () => {
  for (const c of open) await c.close().catch(() => {});
  await d?.stop();
});

async function connect(key?: string): Promise<Client> {
  const url = new URL(`http://api.localhost:${d.http}/mcp`);
  const transport = new StreamableHTTPClientTransport(url, key ? { requestInit: { headers: { authorization: `Bearer ${key}` } } } : {});
  const client = new Client({ name: 'rootbox-test', version: '1.0.0' });
  await client.connect(transport);
  open.push(client);
  return client;
}

type Text = { type: string; text: string };
const body = (r: object) => JSON.parse((r as { content: Text[] }).content[0].text) as Record<string, any>;

const ALL = [
  'create_checkpoint',
  'create_server',
  'credits',
  'delete_server',
  'exec',
  'expose_port',
  'fork_server',
  'get_server',
  'list_checkpoints',
  'list_files',
  'list_servers',
  'read_file',
  'restart_server',
  'restore_checkpoint',
  'server_logs',
  'write_file',
];

test('without an api_key only create_server is offered, and it creates a server and an account', async () => {
  const anon = await connect();
  const { tools } = await anon.listTools();
  assert.equal(
    tools.map((t) => t.name),
    ['create_server'],
  );
  const schema = tools[0].inputSchema as { properties: Record<string, unknown> };
  assert.ok(schema.properties.subdomains, 'the create body schema (subdomains) is the tool input');
  const r = await anon.callTool({ name: 'create_server', arguments: {} });
  assert.not.ok(r.isError, JSON.stringify(r.content));
  const created = body(r);
  assert.match(created.api_key, /^rbx_/);
  assert.match(created.id, /^srv_/);
  assert.equal(r.structuredContent, created);
});

test('with an api_key every tool is offered, each input schema from its route', async () => {
  const anon = await connect();
  const created = body(await anon.callTool({ name: 'create_server', arguments: {} }));
  const c = await connect(created.api_key);
  const { tools } = await c.listTools();
  for (const name of ALL)
    assert.ok(
      tools.some((t) => t.name === name),
      `${name} offered`,
    );
  const get = tools.find((t) => t.name === 'get_server')!;
  assert.equal((get.inputSchema as { required?: string[] }).required, ['id']);
  const logs = tools.find((t) => t.name === 'server_logs')!;
  assert.ok((logs.inputSchema as { properties: Record<string, unknown> }).properties.tail, 'the logs query (tail) is an input');
  const expose = tools.find((t) => t.name === 'expose_port')!;
  assert.equal(((expose.inputSchema as { required?: string[] }).required ?? []).sort(), ['port', 'server']);

  const server = body(await c.callTool({ name: 'get_server', arguments: { id: created.id } }));
  assert.is(server.id, created.id);
  const list = body(await c.callTool({ name: 'list_servers', arguments: {} }));
  assert.equal(
    list.servers.map((s: { id: string }) => s.id),
    [created.id],
  );
  const credits = body(await c.callTool({ name: 'credits', arguments: {} }));
  assert.type(credits.balance_usd, 'number');
  const logsOut = body(await c.callTool({ name: 'server_logs', arguments: { id: created.id, tail: 5 } }));
  assert.ok(Array.isArray(logsOut.lines));
});

test("a tool's error is the API's {error, detail} with isError", async () => {
  const anon = await connect();
  const created = body(await anon.callTool({ name: 'create_server', arguments: {} }));
  const c = await connect(created.api_key);
  const missing = await c.callTool({ name: 'get_server', arguments: { id: 'srv_doesnotexist00' } });
  assert.ok(missing.isError);
  assert.is(body(missing).error, 'server_not_found');
  assert.type(body(missing).detail, 'string');
  const bad = await c.callTool({ name: 'server_logs', arguments: { id: created.id, tail: 5000 } });
  assert.ok(bad.isError);
  assert.is(body(bad).error, 'invalid_request');
  const deleted = await c.callTool({ name: 'delete_server', arguments: { id: created.id } });
  assert.not.ok(deleted.isError, JSON.stringify(deleted.content));
  assert.ok(body(await c.callTool({ name: 'get_server', arguments: { id: created.id } })).error === 'server_not_found');
});

test('the checkpoint tools are offered with their hints and answer what their routes answer; another account gets server_not_found', async () => {
  const anon = await connect();
  const created = body(await anon.callTool({ name: 'create_server', arguments: {} }));
  const c = await connect(created.api_key);
  const { tools } = await c.listTools();
  const hints = (name: string) => tools.find((t) => t.name === name)?.annotations;
  assert.is(hints('restore_checkpoint')?.destructiveHint, true);
  assert.is(hints('list_checkpoints')?.readOnlyHint, true);
  assert.is(hints('create_checkpoint')?.destructiveHint, false);
  assert.is(hints('fork_server')?.destructiveHint, false);
  const restore = tools.find((t) => t.name === 'restore_checkpoint')!;
  assert.equal(((restore.inputSchema as { required?: string[] }).required ?? []).sort(), ['checkpoint', 'id']);
  assert.equal(body(await c.callTool({ name: 'list_checkpoints', arguments: { id: created.id } })), { checkpoints: [] });
  // this tier's servers are plain processes: no disk to copy
  const take = await c.callTool({ name: 'create_checkpoint', arguments: { id: created.id, comment: 'x' } });
  assert.ok(take.isError);
  assert.is(body(take).error, 'not_configured');

  const other = await connect(body(await anon.callTool({ name: 'create_server', arguments: {} })).api_key);
  const calls: [string, Record<string, unknown>][] = [
    ['create_checkpoint', { id: created.id }],
    ['list_checkpoints', { id: created.id }],
    ['restore_checkpoint', { id: created.id, checkpoint: 'ckp_0000000000000000000000' }],
    ['fork_server', { id: created.id }],
  ];
  for (const [name, args] of calls) {
    const r = await other.callTool({ name, arguments: args });
    assert.ok(r.isError, name);
    assert.is(body(r).error, 'server_not_found', name);
  }
});

test('a tool that needs an api_key is refused to an anonymous caller as an unknown tool', async () => {
  const anon = await connect();
  const err = await anon.callTool({ name: 'list_servers', arguments: {} }).then(
    () => undefined,
    (e: Error) => e,
  );
  assert.ok(err, 'refused');
  assert.match(err!.message, /needs Authorization/);
});

test('a wrong api_key is refused with 401 at the transport', async () => {
  const transport = new StreamableHTTPClientTransport(new URL(`http://api.localhost:${d.http}/mcp`), {
    requestInit: { headers: { authorization: `Bearer rbx_${'x'.repeat(32)}` } },
  });
  const client = new Client({ name: 'rootbox-test', version: '1.0.0' });
  const err = await client.connect(transport).then(
    () => undefined,
    (e: Error) => e,
  );
  assert.ok(err, 'connect refused');
  assert.instance(err, StreamableHTTPError);
  assert.is((err as StreamableHTTPError).code, 401);
  assert.match(err!.message, /invalid_api_key/);
  const raw = await fetch(`http://api.localhost:${d.http}/mcp`, {
    method: 'POST',
    headers: { authorization: `Bearer rbx_${'x'.repeat(32)}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  assert.is(raw.status, 401);
  const j = (await raw.json()) as { error: string; detail: string };
  assert.is(j.error, 'invalid_api_key');
  assert.type(j.detail, 'string');
  await client.close().catch(() => {});
});

test.run();
