// POST /servers/{id}/exec: one command in the server (commands.ts runs it like an SSH exec), its
// schemas declared once here for the route and any other caller (an MCP tool calls execute()).
// A string command runs as `/bin/sh -c <command>`, an array as argv; cwd defaults to /root, the
// environment is root's clean login set plus `env`. The answer is either one JSON object (exit
// code, stdout and stderr kept up to hosting.exec.outputMax bytes each, `truncated`) or, with
// `Accept: application/x-ndjson`, one JSON line per output chunk as it comes and a last line with
// the exit; the client closing the connection kills the command and everything it started.

import { StringDecoder } from 'node:string_decoder';
import { z } from 'zod';
import { AppError } from '../errors.js';
import { HANDLED, type HandlerResult, type Req, type Res } from '../http/index.js';
import type { AccountRecord, ServerRecord } from '../store/index.js';
import { tierOf } from './accounts.js';
import { collect, EXEC_PATH, whenClientLeaves, type Commands, type Finished, type Running } from './commands.js';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const noNul = (s: string) => !s.includes('\0');

export const ExecRequest = z
  .object({
    command: z
      .union([
        z.string().min(1).max(65536).refine(noNul, 'must not contain NUL'),
        z.array(z.string().max(65536).refine(noNul, 'must not contain NUL')).min(1).max(4096),
      ])
      .describe('A shell command line (run as /bin/sh -c) or an argv array (run as is, looked up in PATH).'),
    cwd: z.string().startsWith('/', 'must be an absolute path').max(4096).refine(noNul).optional().describe('Working directory (default /root).'),
    env: z
      .record(z.string().regex(ENV_NAME, 'must be a variable name'), z.string().max(32768).refine(noNul))
      .optional()
      .describe('Variables added to the default environment (HOME, USER, LOGNAME, PATH, LANG).'),
    stdin: z
      .string()
      .max(8 * 1024 * 1024)
      .optional()
      .describe('Text given to the command on standard input (then closed; empty when absent).'),
    timeout: z
      .number()
      .positive()
      .optional()
      .describe("Seconds before the command and everything it started are killed (default 60; at most the tier's maximum, 300 / 900 / 3600 s by default)."),
  })
  .strict();
export type ExecRequest = z.infer<typeof ExecRequest>;

export const ExecAnswer = z.object({
  exit_code: z.number().int().nullable().describe('Exit status; null when a signal ended the command (see signal).'),
  signal: z.string().nullable().describe('The signal that ended the command (e.g. SIGKILL), or null.'),
  stdout: z.string().describe('Standard output as UTF-8, up to the bound (1 MiB by default).'),
  stderr: z.string().describe('Standard error as UTF-8, up to the same bound.'),
  truncated: z.boolean().describe('True when stdout or stderr was longer than the bound (the rest was read and dropped).'),
  timed_out: z.boolean().describe('True when the timeout ended the command.'),
  ms: z.number().int().describe('Milliseconds the command ran.'),
});
export type ExecAnswer = z.infer<typeof ExecAnswer>;

export const ExecLine = z
  .union([
    z.object({ stream: z.enum(['stdout', 'stderr']), data: z.string().describe('A chunk of output as UTF-8.') }),
    ExecAnswer.pick({ exit_code: true, signal: true, timed_out: true, ms: true }),
  ])
  .describe('One line of an application/x-ndjson exec answer: output chunks as they come, the exit last.');

export const NDJSON = 'application/x-ndjson';
const DEFAULT_TIMEOUT_S = 60;

export interface ExecSettings {
  outputMax: number;
  timeoutMax: Record<'anonymous' | 'verified' | 'paid', number>;
}

/** Starts the command `req` asks for in `rec` (after the checks of Commands.start). */
export function startExec(commands: Commands, s: ExecSettings, account: AccountRecord, rec: ServerRecord, req: ExecRequest): Promise<Running> {
  const max = s.timeoutMax[tierOf(account)];
  const timeout = req.timeout ?? Math.min(DEFAULT_TIMEOUT_S, max);
  if (timeout > max) throw AppError.of('invalid_request', `timeout is at most ${max} seconds for your tier`);
  const argv = typeof req.command === 'string' ? ['/bin/sh', '-c', req.command] : req.command;
  const env = { HOME: '/root', USER: 'root', LOGNAME: 'root', PATH: EXEC_PATH, LANG: 'C.UTF-8', ...req.env };
  return commands.start(account, rec, { argv, env, cwd: req.cwd ?? '/root' }, Math.round(timeout * 1000));
}

const exitOf = (f: Finished) => ({ exit_code: f.info.signal ? null : (f.info.code ?? 255), signal: f.info.signal, timed_out: f.timedOut, ms: f.ms });

/** Runs `req` to its end and answers with everything at once (the MCP tool's call too). */
export async function execute(commands: Commands, s: ExecSettings, account: AccountRecord, rec: ServerRecord, req: ExecRequest): Promise<ExecAnswer> {
  const r = await startExec(commands, s, account, rec, req);
  r.proc.stdin.end(req.stdin ?? '');
  const [out, err, f] = await Promise.all([collect(r.proc.stdout, s.outputMax), collect(r.proc.stderr, s.outputMax), r.finished]);
  return { ...exitOf(f), stdout: out.data.toString('utf8'), stderr: err.data.toString('utf8'), truncated: out.cut || err.cut };
}

/** Streams `req`'s output to `res` as NDJSON; the client leaving kills the command. */
export async function streamExec(
  commands: Commands,
  s: ExecSettings,
  account: AccountRecord,
  rec: ServerRecord,
  req: ExecRequest,
  http: Req,
  res: Res,
): Promise<HandlerResult> {
  const r = await startExec(commands, s, account, rec, req);
  res.writeHead(200, { 'content-type': NDJSON, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
  whenClientLeaves(http, res, () => r.abort());
  const line = (o: unknown) => {
    if (!res.destroyed) (res as unknown as NodeJS.WritableStream).write(`${JSON.stringify(o)}\n`);
  };
  // Back-pressure: a client that does not read stops the reading of the command's output, so
  // the command blocks on its next write instead of the daemon buffering it.
  const pipe = (stream: 'stdout' | 'stderr', from: NodeJS.ReadableStream) =>
    new Promise<void>((resolve) => {
      const text = new StringDecoder('utf8');
      from.on('data', (b: Buffer) => {
        const data = text.write(b);
        if (data) line({ stream, data });
        if (res.writableNeedDrain) {
          from.pause();
          res.once('drain', () => from.resume());
        }
      });
      const done = () => {
        const rest = text.end();
        if (rest) line({ stream, data: rest });
        resolve();
      };
      from.once('end', done);
      from.once('error', done);
    });
  r.proc.stdin.end(req.stdin ?? '');
  const [f] = await Promise.all([r.finished, pipe('stdout', r.proc.stdout), pipe('stderr', r.proc.stderr)]);
  line(exitOf(f));
  res.end();
  return HANDLED;
}

/** True when the client asked for the streamed answer. */
export const wantsStream = (accept: string | string[] | undefined) => String(accept ?? '').includes(NDJSON);
