// Exec over a WebSocket: `GET wss://api.{domain}/servers/{id}/exec` with `Authorization: Bearer
// <api_key>` and `Upgrade: websocket`. The client's first message is the exec request as JSON
// (the same body as POST /servers/{id}/exec; its `stdin`, if any, is written and stdin stays
// open); then text messages `{"stdin": "…"}` and binary messages are written to the command's
// stdin, `{"eof": true}` closes it. The server sends `{"stream": "stdout"|"stderr", "data"}` as
// output comes, then the exit line (`exit_code`, `signal`, `timed_out`, `ms`) and closes (1000).
// A refusal before the upgrade is an HTTP answer with {error, detail}; after it, one message
// `{"error", "detail"}` and a close (1008 bad input, 1011 otherwise). The socket closing kills the
// command's process group. Output waits for a client that does not read (back-pressure).

import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { AppError, isAppError } from '../errors.js';
import { rawError, validate, type RequestInfo } from '../http/index.js';
import type { Logger } from '../log/index.js';
import type { AccountRecord, ServerRecord } from '../store/index.js';
import type { HostingCore } from './core.js';
import { ExecRequest, startExec } from './exec.js';

const PATH = /^\/servers\/([^/]+)\/exec$/;
/** Time the client has to send its exec request after the upgrade. */
const FIRST_MESSAGE_MS = 10_000;
/** Output bytes sent but not yet taken by the client before the command's output is paused. */
const HIGH_WATER = 1024 * 1024;

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
  ws.close(e && e.kind === 'bad_request' ? 1008 : 1011, e?.code ?? 'internal');
}

/** The first message, and the messages that came after it before the command runs (a client may
 *  send its stdin and eof right behind the request, often in the same read). */
function firstMessage(ws: WebSocket): Promise<{ first: RawData; early: [RawData, boolean][]; stop(): void } | undefined> {
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(undefined), FIRST_MESSAGE_MS);
    ws.once('message', (first) => {
      clearTimeout(t);
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
  ws.on('close', () => running.abort());
  const onMessage = (m: RawData, binary: boolean) => {
    if (running.proc.stdin.writableEnded) return;
    if (binary) return void running.proc.stdin.write(m as Buffer);
    let msg: { stdin?: unknown; eof?: unknown };
    try {
      msg = JSON.parse(m.toString()) as typeof msg;
    } catch {
      return refuse(ws, AppError.of('invalid_json', 'a message after the request is {"stdin": "…"}, {"eof": true} or binary stdin'), log);
    }
    if (typeof msg.stdin === 'string') running.proc.stdin.write(msg.stdin);
    if (msg.eof === true) running.proc.stdin.end();
  };
  running.proc.stdin.on('error', () => {});
  for (const [m, binary] of got.early) onMessage(m, binary);
  ws.on('message', onMessage);
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
