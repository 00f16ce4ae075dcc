// A real runtime for tests: a temp data dir, its own store, its own bridge/subnet/nft table and
// uid ranges (so it never collides with a daemon on the host or another suite), and the shared
// base image cache (ROOTBOX_IMAGE_DIR, default <repo>/var/images; built once when missing).
// cleanup() deletes every server, the network and the data dir, and closes the store.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, type Config } from '../../../src/config/index.js';
import { silentLogger } from '../../../src/log/index.js';
import { buildImage, createRuntime, imageOptions, type ContainerRuntime, type Runtime, type SyncDisk } from '../../../src/runtime/index.js';
import { openStore, type Store } from '../../../src/store/index.js';
import { removeCgroup } from '../../../src/runtime/cgroup.js';

const repo = new URL('../../../', import.meta.url).pathname;
export const IMAGE_DIR = process.env.ROOTBOX_IMAGE_DIR ?? join(repo, 'var', 'images');
export const MiB = 1024 * 1024;

export interface RuntimeEnv {
  cfg: Readonly<Config>;
  dataDir: string;
  store: Store;
  rt: ContainerRuntime;
  /** A fresh runtime instance over the same data dir (a daemon restart). */
  restart(): Promise<ContainerRuntime>;
  cleanup(): Promise<void>;
}

/** `effects`: outside effects the runtime uses instead of the host's (a disk flush that fails). */
export async function startRuntime(tag: string, n: number, runtime: Record<string, unknown> = {}, effects: { syncDisk?: SyncDisk } = {}): Promise<RuntimeEnv> {
  const dataDir = mkdtempSync(join(tmpdir(), `rbx-rt-${tag}-`));
  const cfg = loadConfig({
    env: {},
    overrides: {
      dataDir,
      runtime: {
        imageDir: IMAGE_DIR,
        bridge: `rbt${n}`,
        subnet: `10.199.${n}.0/24`,
        nftTable: `rbt${n}`,
        uidStart: 3_000_000_000 + n * 65536 * 64,
        uidRanges: 64, // its own 64 ranges: the next n's start where these end (runtime/locks.ts refuses an overlap)
        stopGrace: '1s',
        ...runtime,
      },
    },
  });
  await buildImage(imageOptions(cfg), () => {});
  let store = openStore(dataDir);
  let rt: ContainerRuntime | undefined;
  try {
    rt = (await createRuntime(runtimeOnly(cfg), store.runtime, silentLogger, undefined, undefined, effects)).runtime;
  } catch (e) {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  const env: RuntimeEnv = {
    cfg,
    dataDir,
    store,
    rt,
    async restart() {
      await env.rt.close(); // its host-name locks go with it, as with a daemon that ended
      await store.close();
      store = openStore(dataDir);
      env.store = store;
      env.rt = (await createRuntime(runtimeOnly(cfg), store.runtime, silentLogger, undefined, undefined, effects)).runtime;
      return env.rt;
    },
    async cleanup() {
      for (const rec of env.store.runtime.all()) {
        await env.rt.delete(rec.id).catch((e) => console.error('cleanup: delete failed', rec.id, e));
      }
      await env.rt.close();
      await env.rt.net.teardown();
      removeCgroup(`/${cfg.runtime.nftTable}`); // its servers' cgroup parent (spec.ts cgroupPath), when empty
      await env.store.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return env;
}

/** The settings a runtime alone claims on the host (runtime/locks.ts): its names and data dir,
 *  not the port pool and metrics port of a daemon that does not run here. */
export const runtimeOnly = (cfg: Readonly<Config>) => ({ dataDir: cfg.dataDir, runtime: cfg.runtime });

/** Output of a command run inside the server, or a thrown error with its stderr. */
export async function sh(
  rt: Pick<Runtime, 'exec'>,
  id: string,
  script: string,
  input?: string | Buffer,
): Promise<{ code: number | null; out: string; err: string }> {
  const p = rt.exec(id, { argv: ['/bin/bash', '-c', script] });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  p.stdout.on('data', (d: Buffer) => out.push(d));
  p.stderr.on('data', (d: Buffer) => err.push(d));
  p.stdin.end(input ?? '');
  const { code } = await p.exited;
  return { code, out: Buffer.concat(out).toString(), err: Buffer.concat(err).toString() };
}

let seq = 0;
export const newId = (tag: string) => `srv_t${process.pid.toString(36)}${tag}${(seq++).toString(36)}`;

/** A run.sh serving /root/www/index.html on port 80 with python3 (the image has no web server). */
export const RUN_SH = `#!/bin/bash
echo "run.sh starting pid $$"
exec python3 -c '
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80))
s.listen(64)
while True:
    c, _ = s.accept()
    try:
        c.recv(65536)
        body = open("/root/www/index.html", "rb").read()
        c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
    except Exception:
        pass
    c.close()
'
`;

/** GET http://ip:port/ → body, or null when the connection fails or times out. */
export function httpGet(ip: string, port = 80, timeoutMs = 1000): Promise<string | null> {
  return import('node:http').then(
    ({ get }) =>
      new Promise((resolve) => {
        const req = get({ host: ip, port, path: '/', timeout: timeoutMs, agent: false }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (d: Buffer) => chunks.push(d));
          res.on('end', () => resolve(Buffer.concat(chunks).toString()));
          res.on('error', () => resolve(null));
        });
        req.on('timeout', () => req.destroy());
        req.on('error', () => resolve(null));
      }),
  );
}

/** Polls fn until it returns a value that is not null/false, or gives up after timeoutMs. */
export async function waitFor<T>(fn: () => Promise<T | null | false> | T | null | false, timeoutMs: number, everyMs = 25): Promise<T | null> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== null && v !== false) return v as T;
    if (Date.now() > deadline) return null;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
