// Exec over a WebSocket: `GET wss://api.{domain}/servers/{id}/exec` with `Authorization: Bearer
// <api_key>` and `Upgrade: websocket`. The client's first message is the exec request as JSON
// (the same body as POST /servers/{id}/exec; its `stdin`, if any, is written and stdin stays
// open); then text messages `{"stdin": "…"}` and binary messages are written to the command's
// stdin, `{"eof": true}` closes it. The server sends `{"stream": "stdout"|"stderr", "data"}` as
// output comes, then the exit line (`exit_code`, `signal`, `timed_out`, `ms`) and closes (1000).
// A refusal before the upgrade is an HTTP answer with {error, detail}; after it, one message
// `{"error", "detail"}` and a close (1008 bad input, 1011 otherwise). The socket closing kills the
// command's process group. Output waits for a client that does not read, and stdin for a command
// that does not: beyond a small buffer of stdin not yet taken by the command the socket is no
// longer read (paused) until the command takes it (back-pressure both ways).

import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { Writable } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { AppError, isAppError } from '../errors.js';
import { rawError, validate, type RequestInfo } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { metrics } from '../metrics/index.js';
import type { AccountRecord, ServerRecord } from '../store/index.js';
import type { HostingCore } from './core.js';
import { ExecRequest, startExec } from './exec.js';

const PATH = /^\/servers\/([^/]+)\/exec$/;
/** Time the client has to send its exec request after the upgrade. */
const FIRST_MESSAGE_MS = 10_000;
/** Output bytes sent but not yet taken by the client before the command's output is paused. */
const HIGH_WATER = 1024 * 1024;

/** While a socket is paused a client that leaves is not seen (nothing is read): a ping this often
 *  finds out (writing to a connection its client closed fails), so the command is still killed. */
const PAUSED_PING_MS = 1000;

/** The stdin of every exec over a WebSocket that runs (their unwritten bytes are a metric). */
const stdins = new Set<Writable>();
metrics.heldBytes('exec_stdin', () => {
  let n = 0;
  for (const s of stdins) n += s.writableLength;
  return n;
});

export interface ApiUpgrade {
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, info: RequestInfo): void;
}

export function execSocket(core: HostingCore, origin: (req: IncomingMessage, info: RequestInfo) => string, log: Logger): ApiUpgrade {
  const wss = new WebSocketServer({ noServer: true, maxPayload: 9 * 1024 * 1024 });
  return {
    upgrade(req, socket, head, info) {
      void (async () => {
        let account: AccountRecord;
        let rec: ServerRecord;
        try {
          const m = PATH.exec(new URL(req.url ?? '/', 'http://x').pathname);
          if (!m) throw AppError.of('upgrade_not_supported', 'WebSocket upgrades on this host are accepted only at /servers/{id}/exec', { kind: 'not_found' });
          account = await core.accounts.authenticate(req.headers.authorization, info.ip);
          rec = core.servers.owned(account, decodeURIComponent(m[1]));
          core.assertNotExhausted(account, origin(req, info));
        } catch (err) {
          if (!isAppError(err)) log.error('exec socket refused', { err, rid: info.requestId });
          return rawError(socket, isAppError(err) ? err : AppError.of('internal', 'the upgrade failed'), { requestId: info.requestId });
        }
        wss.handleUpgrade(req, socket, head, (ws) => void session(core, account, rec, ws, log.child({ rid: info.requestId })));
      })();
    },
  };
}

const send = (ws: WebSocket, o: unknown, cb?: () => void) => {
  if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(o), cb);
};

function refuse(ws: WebSocket, err: unknown, log: Logger): void {
  const e = isAppError(err) ? err : undefined;
  if (!e) log.error('exec socket failed', { err });
  send(ws, { error: e?.code ?? 'internal', detail: e?.detail ?? 'the command could not be run' });
  ws.resume(); // a paused socket would not read the client's answer to the close
  ws.close(e && e.kind === 'bad_request' ? 1008 : 1011, e?.code ?? 'internal');
}

/** The first message, and the messages that came after it before the command runs (a client may
 *  send its stdin and eof right behind the request, often in the same read). */
function firstMessage(ws: WebSocket): Promise<{ first: RawData; early: [RawData, boolean][]; stop(): void } | undefined> {
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(undefined), FIRST_MESSAGE_MS);
    ws.once('message', (first) => {
      clearTimeout(t);
      // nothing more is read until the command runs: what follows stays in the socket, except
      // the messages already received with the first (held here, a read's worth at most)
      ws.pause();
      const early: [RawData, boolean][] = [];
      const hold = (m: RawData, binary: boolean) => void early.push([m, binary]);
      ws.on('message', hold);
      resolve({ first, early, stop: () => ws.off('message', hold) });
    });
    ws.once('close', () => (clearTimeout(t), resolve(undefined)));
  });
}

async function session(core: HostingCore, account: AccountRecord, rec: ServerRecord, ws: WebSocket, log: Logger): Promise<void> {
  ws.on('error', () => {});
  const got = await firstMessage(ws);
  if (got === undefined) {
    if (ws.readyState === ws.OPEN)
      refuse(ws, AppError.of('invalid_request', `send the exec request as the first message within ${FIRST_MESSAGE_MS / 1000} s`), log);
    return;
  }
  let r;
  try {
    let body: unknown;
    try {
      body = JSON.parse(got.first.toString());
    } catch {
      throw AppError.of('invalid_json', 'the first message must be the exec request as JSON');
    }
    const request = validate(ExecRequest, body, 'message');
    r = await startExec(core.commands, core.execSettings, account, rec, request);
    if (request.stdin) r.proc.stdin.write(request.stdin);
  } catch (err) {
    got.stop();
    return refuse(ws, err, log);
  }
  got.stop();
  const running = r;
  if (ws.readyState !== ws.OPEN) return running.abort();
  const probe = setInterval(() => {
    if (ws.isPaused && ws.readyState === ws.OPEN) ws.ping();
  }, PAUSED_PING_MS);
  probe.unref();
  ws.on('close', () => (clearInterval(probe), running.abort()));
  const stdin = running.proc.stdin;
  stdins.add(stdin);
  // Back-pressure on stdin: the socket is read while the command takes what it is given; once
  // the pipe's buffer is full (write() says so) it is paused until the buffer has drained. A
  // command that is gone takes nothing more: the socket is read again and its input dropped.
  let gone = false;
  const open = () => {
    if (ws.isPaused && (gone || !stdin.writableNeedDrain)) ws.resume();
  };
  const end = () => {
    gone = true;
    stdins.delete(stdin);
    clearInterval(probe);
    open();
  };
  stdin.on('error', () => {});
  stdin.on('drain', open);
  stdin.once('close', end);
  const write = (data: Buffer | string) => {
    if (gone || stdin.writableEnded || stdin.destroyed || ws.readyState !== ws.OPEN) return;
    if (!stdin.write(data)) ws.pause();
  };
  const onMessage = (m: RawData, binary: boolean) => {
    if (gone || stdin.writableEnded || stdin.destroyed) return;
    if (binary) return write(m as Buffer);
    let msg: { stdin?: unknown; eof?: unknown };
    try {
      msg = JSON.parse(m.toString()) as typeof msg;
    } catch {
      return refuse(ws, AppError.of('invalid_json', 'a message after the request is {"stdin": "…"}, {"eof": true} or binary stdin'), log);
    }
    if (typeof msg.stdin === 'string') write(msg.stdin);
    if (msg.eof === true) stdin.end();
  };
  for (const [m, binary] of got.early) onMessage(m, binary);
  ws.on('message', onMessage);
  open();
  void running.finished.then(end);
  let inFlight = 0;
  const paused: NodeJS.ReadableStream[] = [];
  const pipe = (stream: 'stdout' | 'stderr', from: NodeJS.ReadableStream) =>
    new Promise<void>((resolve) => {
      const text = new StringDecoder('utf8');
      const out = (data: string) => {
        inFlight += data.length;
        send(ws, { stream, data }, () => {
          inFlight -= data.length;
          if (inFlight < HIGH_WATER / 2) for (const p of paused.splice(0)) p.resume();
        });
      };
      from.on('data', (b: Buffer) => {
        const data = text.write(b);
        if (data) out(data);
        if (inFlight > HIGH_WATER) (from.pause(), paused.push(from));
      });
      const done = () => {
        const rest = text.end();
        if (rest) out(rest);
        resolve();
      };
      from.once('end', done);
      from.once('error', done);
    });
  const [f] = await Promise.all([running.finished, pipe('stdout', running.proc.stdout), pipe('stderr', running.proc.stderr)]);
  send(ws, { exit_code: f.info.signal ? null : (f.info.code ?? 255), signal: f.info.signal, timed_out: f.timedOut, ms: f.ms }, () => ws.close(1000));
}
