// The MCP endpoint (Streamable HTTP transport of the current MCP specification, stateless: no
// session, every POST carries its own JSON-RPC messages and gets a JSON answer). Built on the
// official SDK's low-level Server: tools/list offers the caller's tools with the JSON schemas
// derived from their routes (tools.ts); tools/call runs the route in-process (Router.invoke) with
// the caller's own Authorization, so a tool answers exactly what the route would — an error
// answer becomes a tool result with isError and the API's {error, detail}. The caller was
// authenticated by the route that serves this endpoint (a wrong key is a 401 at the transport);
// without a key only the anonymous tools (create_server) are offered. The SDK is loaded by the
// first call, not with the daemon (a sixth of the CPU of a daemon's start).

import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { HANDLED, type HandlerResult, type Invocation, type Reply, type Req, type RequestInfo, type Res, type Route } from '../http/index.js';
import { inputsOf, type Tool } from './tools.js';

export interface McpCall {
  req: Req;
  res: Res;
  /** The parsed JSON-RPC body. */
  body: unknown;
  /** Whether the request carried a valid api_key (the route authenticated it). */
  authenticated: boolean;
  info: RequestInfo;
  /** The absolute URL of this endpoint as the client reached it. */
  url: string;
}

export interface McpOptions {
  name: string;
  version: string;
  instructions: string;
  tools: readonly Tool[];
  /** Runs a declared route in-process (the API's Router). */
  router: { invoke(r: Route, call: Invocation): Promise<Reply> };
}

/** Request headers that describe the HTTP exchange itself, not the JSON-RPC message. */
const HOP = new Set(['host', 'content-length', 'connection', 'transfer-encoding', 'keep-alive', 'upgrade']);

interface Sdk {
  Server: typeof import('@modelcontextprotocol/sdk/server/index.js').Server;
  Transport: typeof import('@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js').WebStandardStreamableHTTPServerTransport;
  types: typeof import('@modelcontextprotocol/sdk/types.js');
}
let sdk: Promise<Sdk> | undefined;
const loadSdk = (): Promise<Sdk> =>
  (sdk ??= Promise.all([
    import('@modelcontextprotocol/sdk/server/index.js'),
    import('@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'),
    import('@modelcontextprotocol/sdk/types.js'),
  ]).then(([server, http, types]) => ({ Server: server.Server, Transport: http.WebStandardStreamableHTTPServerTransport, types })));

const text = (value: unknown): CallToolResult['content'] => [{ type: 'text', text: JSON.stringify(value) }];
/** An error answer a route wrote itself (bytes): its JSON, or its text. */
const safeJson = (b: Buffer): unknown => {
  try {
    return JSON.parse(b.toString('utf8'));
  } catch {
    return { error: 'internal', detail: b.toString('utf8').slice(0, 500) };
  }
};
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v) && !Buffer.isBuffer(v);

/** A tool's result from its route's answer: the JSON body, or isError with {error, detail}. */
export function toolResult(tool: Tool, reply: Reply, args: Record<string, unknown>): CallToolResult {
  if (reply.status >= 400 && !tool.def.fine?.(reply, args))
    return { isError: true, content: text(Buffer.isBuffer(reply.body) ? safeJson(reply.body) : reply.body) };
  // a JSON answer a route wrote itself (a create another host answered) is its JSON
  const json = Buffer.isBuffer(reply.body) && /^application\/json\b/.test(String(reply.headers?.['content-type'] ?? ''));
  const value = tool.def.result ? tool.def.result(reply, args) : json ? safeJson(reply.body as Buffer) : reply.body;
  return { content: text(value), ...(isRecord(value) ? { structuredContent: value } : {}) };
}

function serverFor({ Server, types }: Sdk, o: McpOptions, call: McpCall): Server {
  const { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError } = types;
  const server = new Server({ name: o.name, version: o.version }, { capabilities: { tools: {} }, instructions: o.instructions });
  const offered = o.tools.filter((t) => call.authenticated || t.def.anonymous);
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: offered.map((t) => ({
      name: t.def.name,
      description: t.def.description ?? t.route.summary,
      inputSchema: t.inputSchema,
      ...(t.def.annotations ? { annotations: t.def.annotations } : {}),
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (r) => {
    const tool = offered.find((t) => t.def.name === r.params.name);
    if (!tool) {
      const hint = o.tools.some((t) => t.def.name === r.params.name) ? ' (it needs Authorization: Bearer <api_key>)' : '';
      throw new McpError(ErrorCode.InvalidParams, `unknown tool ${String(r.params.name).slice(0, 60)}${hint}`);
    }
    const args = r.params.arguments ?? {};
    const headers: Record<string, string> = { accept: 'application/json', ...(tool.def.headers?.(args) ?? {}) };
    if (typeof call.req.headers.authorization === 'string') headers.authorization = call.req.headers.authorization;
    const raw = tool.def.raw?.(args);
    const reply = await o.router.invoke(tool.route, { headers, ...inputsOf(tool, args), raw, info: call.info });
    return toolResult(tool, reply, args);
  });
  return server;
}

/** Serves one POST of the MCP endpoint and writes its answer. */
export async function serveMcp(o: McpOptions, call: McpCall): Promise<HandlerResult> {
  const mcp = await loadSdk();
  const server = serverFor(mcp, o, call);
  const transport = new mcp.Transport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  await server.connect(transport);
  try {
    const headers = new Headers();
    for (const [k, v] of Object.entries(call.req.headers)) {
      if (k.startsWith(':') || v === undefined || HOP.has(k)) continue;
      for (const one of Array.isArray(v) ? v : [v]) headers.append(k, one);
    }
    const response = await transport.handleRequest(new Request(call.url, { method: 'POST', headers }), { parsedBody: call.body });
    const body = Buffer.from(await response.arrayBuffer());
    const out: Record<string, string> = {};
    response.headers.forEach((v, k) => (out[k] = v));
    out['content-length'] = String(body.length);
    call.res.writeHead(response.status, out);
    call.res.end(body);
  } finally {
    await transport.close();
    await server.close();
  }
  return HANDLED;
}
