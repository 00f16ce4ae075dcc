// A Runtime whose "servers" are plain processes on 127.0.0.1 — NOT containers. It lets the
// sleep/wake logic be tested with real processes that really stop (nothing listens any more)
// and really start (the app binds its port some time after start() resolves, as a run.sh app
// in a woken container does). The container end-to-end tests use the real runc runtime.

import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import type { Runtime, RuntimeServer } from '../../src/runtime/types.js';

export interface ProcServer {
  rec: RuntimeServer;
  port: number;
  /** ms between process start and binding the port; -1 never binds. */
  bindDelay: number;
  child?: ChildProcess;
}

const APP = `
import { createServer } from 'node:http';
import { WebSocketServer } from 'ws';
const [port, delay] = [Number(process.env.PORT), Number(process.env.DELAY)];
const srv = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => res.end(JSON.stringify({ pid: process.pid, url: req.url, bodyLength: Buffer.concat(chunks).length })));
});
new WebSocketServer({ server: srv }).on('connection', (ws) => ws.on('message', (m) => ws.send(m)));
if (delay >= 0) setTimeout(() => srv.listen(port, '127.0.0.1'), delay);
process.on('SIGTERM', () => process.exit(0));
`;

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const p = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return p;
}

export class ProcessRuntime implements Pick<Runtime, 'start' | 'stop' | 'get' | 'list'> {
  readonly servers = new Map<string, ProcServer>();
  starts = 0;
  stops = 0;

  add(id: string, slug: string, rootfs: string, port: number, opts: { bindDelay?: number; running?: boolean } = {}): ProcServer {
    const s: ProcServer = {
      rec: { id, slug, ip: '127.0.0.1', uidBase: 0, memoryBytes: 0, diskBytes: 0, rootfs, state: 'sleeping' },
      port,
      bindDelay: opts.bindDelay ?? 0,
    };
    this.servers.set(id, s);
    return s;
  }

  get(id: string): RuntimeServer | undefined {
    const s = this.servers.get(id);
    return s ? { ...s.rec } : undefined;
  }

  list(): RuntimeServer[] {
    return [...this.servers.values()].map((s) => ({ ...s.rec }));
  }

  async start(id: string): Promise<void> {
    const s = this.servers.get(id)!;
    this.starts++;
    const child = spawn(process.execPath, ['--input-type=module', '-e', APP], {
      cwd: new URL('../..', import.meta.url).pathname,
      env: { ...process.env, PORT: String(s.port), DELAY: String(s.bindDelay) },
      stdio: 'ignore',
    });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    s.child = child;
    s.rec.state = 'running';
  }

  async stop(id: string): Promise<void> {
    const s = this.servers.get(id)!;
    this.stops++;
    const child = s.child;
    s.child = undefined;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
    s.rec.state = 'sleeping';
  }

  async stopAll(): Promise<void> {
    for (const id of this.servers.keys()) if (this.servers.get(id)!.child) await this.stop(id);
  }
}
