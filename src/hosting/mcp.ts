// The hosting API as MCP tools at /mcp (api.{domain}): which routes are tools and under which
// names. Each tool's input schema is its route's declared inputs and a call runs that route
// (src/mcp), so the tools answer what the API answers — its errors, limits and upgrade envelope.

import { z } from 'zod';
import { BadRequestBody, routes, type BaseCtx, type Invocation, type Reply, type Route, type Step } from '../http/index.js';
import { resolveTools, serveMcp, type Tool, type ToolDef } from '../mcp/index.js';
import type { AccountRecord } from '../store/index.js';
import { JsonRpcError } from './schemas.js';

export const MCP_PATH = '/mcp';

/** Most bytes read_file hands back in one call (a tool result is held whole by the client). */
const READ_MAX = 256 * 1024;

/** read_file's result: the bytes read, how they are given, and how big the file is. */
function fileContent(reply: Reply, a: Record<string, unknown>) {
  const bytes = Buffer.isBuffer(reply.body) && reply.status < 400 ? reply.body : Buffer.alloc(0);
  const total = /\/(\d+)$/.exec(String(reply.headers?.['content-range'] ?? ''))?.[1];
  const size = total !== undefined ? Number(total) : bytes.length;
  const offset = Math.max(0, Number(a.offset ?? 0) | 0);
  const encoding = a.encoding === 'base64' ? 'base64' : 'utf8';
  return { path: String(a.path), size, offset, length: bytes.length, more: offset + bytes.length < size, encoding, content: bytes.toString(encoding) };
}

export const TOOLS: readonly ToolDef[] = [
  {
    name: 'create_server',
    method: 'POST',
    path: '/create',
    anonymous: true,
    description: 'Create a root Linux server (and an account when called without an api_key): answers its id, URL, ssh line, private key and api_key.',
  },
  { name: 'list_servers', method: 'GET', path: '/servers' },
  { name: 'get_server', method: 'GET', path: '/servers/:id' },
  { name: 'delete_server', method: 'DELETE', path: '/servers/:id' },
  { name: 'restart_server', method: 'POST', path: '/servers/:id/restart' },
  { name: 'exec', method: 'POST', path: '/servers/:id/exec' },
  {
    name: 'read_file',
    method: 'GET',
    path: '/servers/:id/files',
    description: `Read a file of the server (at most ${READ_MAX / 1024} KiB per call: offset and length read further). A file of a sleeping server is read without waking it when no symlink is on its path.`,
    omit: ['list', 'archive', 'gzip', 'mode'],
    extra: {
      offset: { type: 'integer', minimum: 0, description: 'First byte to read (default 0).' },
      length: { type: 'integer', minimum: 1, maximum: READ_MAX, description: `Bytes to read (default and most ${READ_MAX}).` },
      encoding: { type: 'string', enum: ['utf8', 'base64'], description: 'How content is given: utf8 (default) or base64 for binary files.' },
    },
    headers: (a) => {
      const offset = Math.max(0, Number(a.offset ?? 0) | 0);
      const length = Math.min(READ_MAX, Math.max(1, Number(a.length ?? READ_MAX) | 0));
      return { range: `bytes=${offset}-${offset + length - 1}` };
    },
    result: (reply, a) => fileContent(reply, a),
    fine: (reply, a) => reply.status === 416 && !a.offset && /\/0$/.test(String(reply.headers?.['content-range'] ?? '')), // an empty file
  },
  {
    name: 'write_file',
    method: 'PUT',
    path: '/servers/:id/files',
    description: 'Write a whole file of the server (parent directories made; mode optional, octal). Wakes a sleeping server.',
    omit: ['list', 'archive', 'gzip'],
    extra: {
      content: { type: 'string', description: 'The file content.' },
      encoding: { type: 'string', enum: ['utf8', 'base64'], description: 'How content is given: utf8 (default) or base64.' },
    },
    extraRequired: ['content'],
    raw: (a) => Buffer.from(String(a.content ?? ''), a.encoding === 'base64' ? 'base64' : 'utf8'),
  },
  {
    name: 'list_files',
    method: 'GET',
    path: '/servers/:id/files',
    fixedQuery: { list: '1' },
    omit: ['archive', 'gzip', 'mode'],
    description: 'List a directory of the server: names, types, sizes, modes, mtimes.',
  },
  { name: 'expose_port', method: 'POST', path: '/expose' },
  { name: 'server_logs', method: 'GET', path: '/servers/:id/logs' },
  { name: 'credits', method: 'GET', path: '/credits' },
  { name: 'create_checkpoint', method: 'POST', path: '/servers/:id/checkpoints', annotations: { readOnlyHint: false, destructiveHint: false } },
  { name: 'list_checkpoints', method: 'GET', path: '/servers/:id/checkpoints', annotations: { readOnlyHint: true } },
  {
    name: 'restore_checkpoint',
    method: 'POST',
    path: '/servers/:id/restore',
    description:
      "Make the server's disk that of one of its checkpoints: every file written since is lost, the server restarts (its run.sh app comes back). Every piece is verified first; a damaged checkpoint changes nothing.",
    annotations: { readOnlyHint: false, destructiveHint: true },
  },
  { name: 'fork_server', method: 'POST', path: '/servers/:id/fork', annotations: { readOnlyHint: false, destructiveHint: false } },
];

/** One JSON-RPC message or a batch, as the transport takes them (it checks the rest). */
const McpBody = z
  .union([z.looseObject({ jsonrpc: z.literal('2.0') }), z.array(z.looseObject({ jsonrpc: z.literal('2.0') })).min(1)])
  .describe('A JSON-RPC 2.0 message (initialize, tools/list, tools/call …) or a batch of them.');

export interface McpRouteDeps {
  version: string;
  ipLimit: Step;
  /** The router's declared routes, read when the first call comes (every route is added by then). */
  routes(): readonly Route[];
  invoke(r: Route, call: Invocation): Promise<Reply>;
  origin(ctx: BaseCtx): string;
}

export function mcpRoute(d: McpRouteDeps): Route<AccountRecord> {
  let tools: Tool[] | undefined;
  const route = routes<AccountRecord>();
  return route({
    method: 'POST',
    path: MCP_PATH,
    auth: 'optional',
    summary: 'MCP endpoint (Streamable HTTP, stateless): this API as tools for agents',
    description:
      'Model Context Protocol over Streamable HTTP. Send JSON-RPC with Accept: application/json, text/event-stream. ' +
      'With Authorization: Bearer <api_key> every tool is offered (create_server, list_servers, get_server, delete_server, restart_server, exec, ' +
      'read_file, write_file, list_files, expose_port, server_logs, credits, create_checkpoint, list_checkpoints, restore_checkpoint, fork_server); without one only create_server. A tool answers what its route answers; ' +
      'an error is a tool result with isError and the {error, detail} body.',
    use: [d.ipLimit],
    body: McpBody,
    bodyLimit: 8 * 1024 * 1024,
    responses: {
      200: { description: 'The JSON-RPC answer', json: z.unknown() },
      202: { description: 'A notification or answer was accepted (no body).' },
      400: { description: 'Not a JSON-RPC message, or a protocol version the transport does not speak.', json: z.union([BadRequestBody, JsonRpcError]) },
      406: { description: 'The Accept header does not list both application/json and text/event-stream.', json: JsonRpcError },
      413: 'The message is over 8 MiB.',
    },
    handler(ctx) {
      tools ??= resolveTools(TOOLS, d.routes());
      const info = { host: ctx.host, scheme: ctx.scheme, ip: ctx.ip, requestId: ctx.requestId };
      const options = { name: 'rootbox', version: d.version, instructions: INSTRUCTIONS, tools, router: d };
      return serveMcp(options, { req: ctx.req, res: ctx.res, body: ctx.body, authenticated: ctx.auth !== undefined, info, url: d.origin(ctx) + MCP_PATH });
    },
  });
}

const INSTRUCTIONS =
  'rootbox gives you root Linux servers. Call create_server (no key needed) and keep the api_key it returns: ' +
  'send it as Authorization: Bearer <api_key> to this endpoint to use the other tools — run commands with exec, move files with ' +
  'write_file/read_file/list_files, publish ports with expose_port, read run.sh output with server_logs, go back in time with create_checkpoint/restore_checkpoint and copy a server with fork_server. Files in /root/www are served ' +
  'at the server URL; an executable /root/run.sh is run and served on port 80.';
