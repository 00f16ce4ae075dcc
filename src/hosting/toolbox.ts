// The routes that let an agent with only HTTP tools work on its server: run a command
// (POST /servers/{id}/exec, exec.ts) and move files (/servers/{id}/files, files.ts). Declared once
// here like every route (the OpenAPI document is generated from them); each checks the server is
// the caller's and, while the account's grant is used up without credit, answers 402 with the
// upgrade envelope as the other read and write endpoints do. They run inside the server, so they
// wake a sleeping one and thaw a dozing one, but for a sleeping server's file read without a symlink.

import { z } from 'zod';
import { AppError } from '../errors.js';
import { routes, type BaseCtx, type Route, type Step } from '../http/index.js';
import type { AccountRecord } from '../store/index.js';
import type { HostingCore } from './core.js';
import { ExecAnswer, ExecLine, ExecRequest, execute, NDJSON, streamExec, wantsStream } from './exec.js';
import { ArchiveQuery, FileList, FilesQuery, Written } from './fileshapes.js';
import { Ok, ServerPath, UpgradeEnvelope } from './schemas.js';

const envelope = {
  description: 'The account used up its free grant and has no credit (the upgrade envelope), or the server is suspended',
  json: UpgradeEnvelope,
};
const busy = 'The server (over SSH and HTTP together) or the account runs its maximum of commands at once (too_many_commands); wait for one to end.';
const waking = 'The server could not be woken or is still being created (see Retry-After).';

export function toolboxRoutes(core: HostingCore, ipLimit: Step, base: (ctx: BaseCtx) => string): Route<AccountRecord>[] {
  const route = routes<AccountRecord>();
  const notFound = (p: Record<string, string>) => new AppError('not_found', 'server_not_found', `you have no server ${String(p.id).slice(0, 40)}`);
  const server = { params: ServerPath, notFound, use: [ipLimit] };
  /** The caller's server, once the grant check passed. */
  const owned = (ctx: BaseCtx & { auth: AccountRecord; params: { id: string } }) => {
    const rec = core.servers.owned(ctx.auth, ctx.params.id);
    core.assertNotExhausted(ctx.auth, base(ctx));
    return rec;
  };
  const maxBody = core.cfg.hosting.files.maxBody;
  return [
    route({
      method: 'POST',
      path: '/servers/:id/exec',
      auth: 'bearer',
      summary: 'Run a command in the server (like an SSH exec): exit code, stdout, stderr; streamed as NDJSON with Accept: application/x-ndjson',
      description:
        'A string command runs as `/bin/sh -c`, an array as argv, as root in /root (or `cwd`). Everything the command started is killed at `timeout` (default 60 s) and when a streaming client disconnects. Wakes a sleeping server, thaws a dozing one.',
      ...server,
      body: ExecRequest,
      bodyLimit: 9 * 1024 * 1024,
      responses: {
        200: {
          description: 'The command ended: its exit and output (NDJSON: output lines as they come, the exit last)',
          json: ExecAnswer,
          media: { [NDJSON]: ExecLine },
        },
        400: 'Bad input: command, cwd, env, stdin or a timeout over the tier maximum.',
        402: envelope,
        404: 'No such server of yours.',
        429: busy,
        503: waking,
      },
      handler: async (ctx) => {
        const rec = owned(ctx);
        if (wantsStream(ctx.req.headers.accept)) return streamExec(core.commands, core.execSettings, ctx.auth, rec, ctx.body, ctx.req, ctx.res);
        return { status: 200, body: await execute(core.commands, core.execSettings, ctx.auth, rec, ctx.body) };
      },
    }),
    route({
      method: 'GET',
      path: '/servers/:id/files',
      auth: 'bearer',
      summary: 'Read a file of the server (Range supported), list a directory (list=1) or download it as a tar (archive=1, gzip=1)',
      description:
        'Paths resolve inside the server (a symlink leads to its target inside the server only). A file of a sleeping server reached without a symlink is read from its disk without waking it; anything else wakes it.',
      ...server,
      query: FilesQuery,
      responses: {
        200: {
          description: 'The file (Content-Type guessed from its name), the listing, or the tar archive',
          json: FileList,
          media: { 'application/octet-stream': z.string(), 'application/x-tar': z.string(), 'application/gzip': z.string() },
        },
        206: { description: 'The asked Range of the file (Content-Range)', media: { 'application/octet-stream': z.string() } },
        400: 'The path is not absolute, has `..`, or names a directory where a file is wanted (or a file where a directory is).',
        402: envelope,
        404: 'No such server of yours (server_not_found), or nothing at the path (file_not_found).',
        416: 'The Range lies outside the file.',
        429: busy,
        503: waking,
      },
      handler: async (ctx) => {
        const rec = owned(ctx);
        const q = ctx.query;
        if (q.list) return { status: 200, body: await core.files.list(ctx.auth, rec, q.path) };
        if (q.archive) return core.files.archive(ctx.auth, rec, q.path, !!q.gzip, ctx.req, ctx.res);
        return core.files.read(ctx.auth, rec, q.path, ctx.req, ctx.res);
      },
    }),
    route({
      method: 'PUT',
      path: '/servers/:id/files',
      auth: 'bearer',
      summary: 'Write a file of the server from the raw request body (parent directories made, `mode` optional)',
      description: 'The file is written whole or not at all (a temporary file renamed into place). Wakes a sleeping server.',
      ...server,
      query: FilesQuery,
      bodyLimit: maxBody,
      responses: {
        200: { description: 'Written: the path and its size', json: Written },
        400: 'The path is not absolute, has `..`, or is a directory.',
        402: envelope,
        404: 'No such server of yours.',
        413: 'The body is larger than hosting.files.maxBody.',
        429: busy,
        503: waking,
        507: "The server's disk ceiling was reached (disk_full); nothing was written and the server stays usable.",
      },
      handler: async (ctx) => ({ status: 200, body: await core.files.write(ctx.auth, owned(ctx), ctx.query.path, ctx.query.mode, ctx.req) }),
    }),
    route({
      method: 'DELETE',
      path: '/servers/:id/files',
      auth: 'bearer',
      summary: 'Delete a file or a directory (with its contents) of the server',
      ...server,
      query: FilesQuery,
      responses: {
        200: { description: 'Deleted', json: Ok },
        400: 'The path is not absolute, has `..`, or is /.',
        402: envelope,
        404: 'No such server of yours, or nothing at the path.',
        429: busy,
        503: waking,
      },
      handler: async (ctx) => {
        await core.files.remove(ctx.auth, owned(ctx), ctx.query.path);
        return { status: 200, body: { ok: true } };
      },
    }),
    route({
      method: 'POST',
      path: '/servers/:id/files/archive',
      auth: 'bearer',
      summary: 'Unpack a tar archive (optionally gzipped), sent as the raw body, into a directory of the server (made when missing)',
      ...server,
      query: ArchiveQuery,
      bodyLimit: maxBody,
      responses: {
        200: { description: 'Unpacked', json: Ok },
        400: 'The path is not absolute or not a directory, or the body is not a tar archive (invalid_archive).',
        402: envelope,
        404: 'No such server of yours.',
        413: 'The body is larger than hosting.files.maxBody.',
        429: busy,
        503: waking,
        507: "The server's disk ceiling was reached (disk_full); what was unpacked before stays.",
      },
      handler: async (ctx) => {
        await core.files.unpack(ctx.auth, owned(ctx), ctx.query.path, ctx.req);
        return { status: 200, body: { ok: true } };
      },
    }),
  ];
}
