// MCP: rootbox as a Model Context Protocol server (Streamable HTTP). The API that mounts it
// declares which of its routes are tools (ToolDef); this module derives their schemas from those
// routes and serves the endpoint with the official SDK.
export { resolveTools, inputsOf, type Tool, type ToolDef } from './tools.js';
export { serveMcp, toolResult, type McpCall, type McpOptions } from './endpoint.js';
