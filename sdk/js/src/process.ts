// A command run over the exec WebSocket (GET /servers/{id}/exec with Upgrade: websocket): stdin
// stays open for write() until end(), output comes to onStdout/onStderr as it is written, and
// wait() answers how it ended. Closing the socket (kill()) kills the command and everything it
// started. Needs the `ws` package (an optional peer dependency: the only one the SDK has).

import type { IncomingMessage } from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import { errorOf, RootboxError } from './errors.js';
import type { Transport } from './http.js';
import type { ExecResult } from './types.js';
import { fromWire, toWire } from './wire.js';

export interface SpawnOptions {
  cwd?: string;
  env?: Record<string, string>;
  /** Seconds before the command and everything it started are killed (the API's default: 60). */
  timeout?: number;
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
}

type Socket = {
  send(data: string | Uint8Array, cb?: (err?: Error) => void): void;
  close(code?: number): void;
  terminate(): void;
  on(event: string, fn: (...args: never[]) => void): void;
  readyState: number;
};

export class Process {
  private readonly out = { stdout: [] as string[], stderr: [] as string[] };
  private readonly done: Promise<ExecResult>;

  /** @internal made by Server.spawn */
  constructor(
    private readonly ws: Socket,
    opts: SpawnOptions,
    opened: Promise<void>,
  ) {
    this.done = new Promise<ExecResult>((resolve, reject) => {
      let exit: Record<string, unknown> | undefined;
      let failure: RootboxError | undefined;
      ws.on('message', (data: Buffer) => {
        const o = JSON.parse(data.toString('utf8')) as Record<string, unknown>;
        if ((o.stream === 'stdout' || o.stream === 'stderr') && typeof o.data === 'string') {
          this.out[o.stream].push(o.data);
          (o.stream === 'stdout' ? opts.onStdout : opts.onStderr)?.(o.data);
        } else if ('exit_code' in o) exit = o;
        else if (typeof o.error === 'string') failure = new RootboxError({ status: 0, code: o.error, detail: String(o.detail ?? ''), body: o });
      });
      ws.on('close', (code: number) => {
        if (exit) {
          const e = fromWire<Omit<ExecResult, 'stdout' | 'stderr' | 'truncated'>>(exit);
          resolve({
            exitCode: e.exitCode,
            signal: e.signal,
            stdout: this.out.stdout.join(''),
            stderr: this.out.stderr.join(''),
            truncated: false,
            timedOut: e.timedOut,
            ms: e.ms,
          });
        } else
          reject(failure ?? new RootboxError({ status: 0, code: 'connection_failed', detail: `the exec socket closed (${code}) before the command's exit` }));
      });
      opened.catch(reject);
    });
    this.done.catch(() => {}); // seen by wait(); a caller that never waits gets no unhandled rejection
  }

  /** Writes to the command's stdin (a string as UTF-8 text, bytes as they are). */
  write(data: string | Uint8Array): Promise<void> {
    return new Promise((resolve, reject) =>
      this.ws.send(typeof data === 'string' ? JSON.stringify({ stdin: data }) : data, (err) => (err ? reject(err) : resolve())),
    );
  }

  /** Closes the command's stdin. */
  end(): Promise<void> {
    return new Promise((resolve, reject) => this.ws.send(JSON.stringify({ eof: true }), (err) => (err ? reject(err) : resolve())));
  }

  /** Ends the command (and everything it started): the socket is closed. */
  kill(): void {
    this.ws.terminate();
  }

  /** How the command ended, with all its output. */
  wait(): Promise<ExecResult> {
    return this.done;
  }
}

/** Opens the exec socket and sends the request; a refusal before the upgrade is the API's RootboxError. */
export async function spawnExec(t: Transport, path: string, command: string | string[], opts: SpawnOptions): Promise<Process> {
  let WebSocket: new (url: string, o: Record<string, unknown>) => Socket;
  try {
    ({ default: WebSocket } = (await import('ws')) as unknown as { default: typeof WebSocket });
  } catch {
    throw new TypeError('spawn() needs the ws package (npm install ws)');
  }
  const u = t.url(path);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  const headers: Record<string, string> = t.apiKey ? { authorization: `Bearer ${t.apiKey}` } : {};
  const ws = new WebSocket(u.toString(), { headers, ca: t.ca, perMessageDeflate: false });
  const opened = new Promise<void>((resolve, reject) => {
    ws.on('open', () => resolve());
    ws.on('error', (e: Error) => reject(new RootboxError({ status: 0, code: 'connection_failed', detail: e.message, cause: e })));
    ws.on('unexpected-response', (_req: unknown, res: IncomingMessage) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => reject(errorOf(res.statusCode ?? 0, Buffer.concat(parts).toString('utf8'), res.headers)));
    });
  });
  const p = new Process(ws, opts, opened);
  await opened;
  ws.send(JSON.stringify(toWire('ExecRequest', { command, cwd: opts.cwd, env: opts.env, timeout: opts.timeout })));
  return p;
}
