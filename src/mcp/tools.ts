// The MCP tools, each one a declared route of the hosting API: its input schema is the route's
// path parameters, query and JSON body (the zod schemas the Router validates and OpenAPI
// describes, written once), and a call runs that route in-process through Router.invoke — the
// same rate limits, caller, validation, upgrade envelope, 402 answers and errors as over HTTP.

import type { z } from 'zod';
import { jsonSchemaOf, type Reply, type Route } from '../http/index.js';

/** One tool: which route it runs, and how its arguments split into that route's inputs. */
export interface ToolDef {
  name: string;
  method: Route['method'];
  path: string;
  /** Tool description; the route's summary when absent. */
  description?: string;
  /** Offered to a caller without an api_key (only create_server, as /create). */
  anonymous?: boolean;
  /** Query values always sent (e.g. list=1 for list_files). */
  fixedQuery?: Record<string, string>;
  /** Route inputs this tool does not offer (the route's other modes). */
  omit?: string[];
  /** Arguments that are not route inputs (read_file's encoding), with their JSON schema. */
  extra?: Record<string, Record<string, unknown>>;
  /** Which of `extra` are required. */
  extraRequired?: string[];
  /** Request headers made from the arguments (read_file's Range). */
  headers?(args: Record<string, unknown>): Record<string, string>;
  /** The raw request body made from the arguments (write_file's content). */
  raw?(args: Record<string, unknown>): Buffer;
  /** Turns the route's answer into the tool's result value (a file's bytes into text). */
  result?(reply: Reply, args: Record<string, unknown>): unknown;
  /** An error answer that is a result for this tool (read_file of an empty file: 416 at offset 0). */
  fine?(reply: Reply, args: Record<string, unknown>): boolean;
  /** MCP's hints to the client: a tool that only reads, or one that destroys what it replaces. */
  annotations?: { readOnlyHint?: boolean; destructiveHint?: boolean; idempotentHint?: boolean };
}

export interface Tool {
  def: ToolDef;
  route: Route;
  inputSchema: { type: 'object'; properties: Record<string, unknown>; required?: string[] };
  /** Which argument goes where. */
  keys: { params: string[]; query: string[]; body: string[] };
}

type Json = Record<string, unknown>;

/** The object schema's properties and required list, as JSON Schema of the input type. */
function objectParts(s: z.ZodType | undefined, hidden: string[] = []): { properties: Json; required: string[] } {
  if (!s) return { properties: {}, required: [] };
  const j = jsonSchemaOf(s, 'input');
  const obj = (j.anyOf as Json[] | undefined)?.find((x) => x.type === 'object') ?? j;
  const properties = { ...((obj.properties as Json | undefined) ?? {}) };
  let required = (obj.required as string[] | undefined) ?? [];
  for (const k of hidden) {
    delete properties[k];
    required = required.filter((r) => r !== k);
  }
  return { properties, required };
}

/** Resolves each tool's route among the router's declared routes; a tool without one is a wiring bug. */
export function resolveTools(defs: readonly ToolDef[], routes: readonly Route[]): Tool[] {
  return defs.map((def) => {
    const route = routes.find((r) => r.method === def.method && r.path === def.path);
    if (!route) throw new Error(`MCP tool ${def.name}: no route ${def.method} ${def.path}`);
    const hidden = [...Object.keys(def.fixedQuery ?? {}), ...(def.omit ?? [])];
    const parts = [objectParts(route.params), objectParts(route.query, hidden), objectParts(route.body, def.omit)];
    const properties: Json = Object.assign({}, ...parts.map((p) => p.properties), def.extra ?? {});
    const required = [...new Set([...parts.flatMap((p) => p.required), ...(def.extraRequired ?? [])])];
    const [params, query, body] = parts.map((p) => Object.keys(p.properties));
    return { def, route, keys: { params, query, body }, inputSchema: { type: 'object', properties, ...(required.length ? { required } : {}) } };
  });
}

/** The route's inputs from a tool call's arguments: each named by the schema that declares it. */
export function inputsOf(tool: Tool, args: Record<string, unknown>): { params: Record<string, string>; query: Record<string, string>; body: unknown } {
  const params: Record<string, string> = {};
  for (const k of tool.keys.params) if (args[k] !== undefined) params[k] = String(args[k]);
  const query: Record<string, string> = { ...(tool.def.fixedQuery ?? {}) };
  for (const k of tool.keys.query) if (args[k] !== undefined) query[k] = String(args[k]);
  let body: unknown;
  if (tool.route.body) {
    const b: Record<string, unknown> = {};
    for (const k of tool.keys.body) if (args[k] !== undefined) b[k] = args[k];
    body = Object.keys(b).length ? b : undefined;
  }
  return { params, query, body };
}
