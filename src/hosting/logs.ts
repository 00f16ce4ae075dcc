// GET /servers/{id}/logs: what the server's app and its supervisor said, read from the host's view
// of the server's root filesystem (mounted while it sleeps too), so reading never wakes a server.
//   lines     the last `tail` lines of /var/log/run.sh.log (run.sh's output and the supervisor's
//             own lines), continued from run.sh.log.1 when the current file has fewer;
//   events    the supervisor's events among them (started, exited with status, restarting in N s,
//             run.sh changed) and the daemon's lines of /var/log/rootbox.log (OOM kills), by time;
//   oom_kills how many processes of the server the kernel killed for memory (rootbox.log).
// Files are opened without following any symlink (runtime's readTail), so a user's link never
// makes the daemon read outside the server.

import { z } from 'zod';
import { oomKillsIn, readTail, ROOTBOX_LOG } from '../runtime/index.js';

const RUN_LOG = '/var/log/run.sh.log';
/** Bytes read from the end of a log: bounds the work of one request whatever the file holds. */
const READ_MAX = 256 * 1024;
const LINE_MAX = 2000;

export const LogsQuery = z.object({
  tail: z.coerce.number().int('must be a whole number').min(1).max(1000).optional().describe('How many lines (and events) to return, 1 to 1000 (default 100).'),
});

const LogEvent = z.object({
  at: z.string().describe('When, as the line says (ISO 8601).'),
  source: z.enum(['supervisor', 'rootbox']).describe('supervisor: the init that runs /root/run.sh; rootbox: the host (OOM kills).'),
  kind: z.enum(['started', 'exited', 'restarting', 'changed', 'oom_kill', 'other']),
  message: z.string(),
  status: z.number().int().optional().describe('exited: the exit status (128+n: killed by signal n; 137 is SIGKILL, as after an OOM kill).'),
  in_seconds: z.number().optional().describe('restarting: seconds until run.sh starts again.'),
});

export const LogsAnswer = z.object({
  lines: z.array(z.string()).describe('The last lines of /var/log/run.sh.log, oldest first (each cut at 2000 characters).'),
  events: z.array(LogEvent).describe("The supervisor's events and the host's OOM-kill lines, oldest first."),
  oom_kills: z.number().int().min(0).describe('Processes of this server the kernel killed for lack of memory (as /var/log/rootbox.log tells).'),
});
export type LogsAnswer = z.infer<typeof LogsAnswer>;
type LogEvent = z.infer<typeof LogEvent>;

/** Complete lines of a log's tail (a first line cut by the read window is dropped). */
async function tailLines(root: string, path: string): Promise<string[]> {
  const buf = await readTail(root, path, READ_MAX);
  if (!buf?.length) return [];
  const lines = buf.toString('utf8').split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  if (buf.length === READ_MAX) lines.shift();
  return lines.map((l) => (l.length > LINE_MAX ? l.slice(0, LINE_MAX) : l));
}

const EVENT = /^\[(supervisor|rootbox) ([^\]]+)\] (.*)$/;

function event(line: string): LogEvent | undefined {
  const m = EVENT.exec(line);
  if (!m) return undefined;
  const [, source, at, message] = m as unknown as [string, 'supervisor' | 'rootbox', string, string];
  const e: LogEvent = { at, source, kind: 'other', message };
  let x: RegExpExecArray | null;
  if (source === 'rootbox') e.kind = message.startsWith('out of memory:') ? 'oom_kill' : 'other';
  else if (message.startsWith('starting ')) e.kind = 'started';
  else if ((x = /exited with status (\d+)/.exec(message))) Object.assign(e, { kind: 'exited', status: Number(x[1]) });
  else if ((x = /^restarting in ([\d.]+) s/.exec(message))) Object.assign(e, { kind: 'restarting', in_seconds: Number(x[1]) });
  else if (message.includes('changed')) e.kind = 'changed';
  return e;
}

/** The logs of a server whose root filesystem is at `rootfs` on the host (see the header). */
export async function serverLogs(rootfs: string | undefined, tail = 100): Promise<LogsAnswer> {
  if (!rootfs) return { lines: [], events: [], oom_kills: 0 };
  let lines = await tailLines(rootfs, RUN_LOG);
  if (lines.length < tail) lines = [...(await tailLines(rootfs, `${RUN_LOG}.1`)), ...lines];
  const rootbox = await readTail(rootfs, ROOTBOX_LOG, 2 * 1024 * 1024);
  const text = rootbox?.toString('utf8') ?? '';
  const events = [
    ...lines,
    ...text
      .split('\n')
      .slice(-1000)
      .map((l) => l.slice(0, LINE_MAX)),
  ]
    .map(event)
    .filter((e): e is LogEvent => !!e)
    .sort((a, b) => (Date.parse(a.at) || 0) - (Date.parse(b.at) || 0));
  return { lines: lines.slice(-tail), events: events.slice(-tail), oom_kills: oomKillsIn(text) };
}
