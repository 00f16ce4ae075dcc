// Shared by the billing tests: the hosting API over plain HTTP on a test daemon, and what the
// host itself says about a server's ceilings (its cgroup's memory limit, its disk image and
// filesystem size).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, statfsSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { cgroupDirs } from '../../src/runtime/cgroup.js';
import { cgroupPath } from '../../src/runtime/spec.js';

export interface Answer {
  status: number;
  body: any;
  headers: Record<string, string | string[] | undefined>;
}

export function call(
  port: number,
  method: string,
  path: string,
  opts: { key?: string; body?: unknown; host?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const data = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        headers: {
          host: opts.host ?? 'api.localhost',
          ...(opts.key ? { authorization: `Bearer ${opts.key}` } : {}),
          ...(data ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(data)) } : {}),
          ...opts.headers,
        },
      },
      (res) => {
        let s = '';
        res.on('data', (c) => (s += c));
        res.on('end', () => {
          let body: any = s;
          try {
            body = JSON.parse(s);
          } catch {
            /* not JSON */
          }
          resolve({ status: res.statusCode!, body, headers: res.headers });
        });
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

/** The memory limit the kernel enforces on the server's cgroup (v1 or v2) on the daemon of `runtime`. */
export function cgroupMemoryLimit(runtime: { nftTable: string }, id: string): number {
  const dirs = cgroupDirs(cgroupPath(runtime, id));
  const v1 = dirs.find((d) => d.includes('/memory/'));
  const text = v1 ? readFileSync(join(v1, 'memory.limit_in_bytes'), 'utf8') : readFileSync(join(dirs[0], 'memory.max'), 'utf8');
  return Number(text.trim());
}

/** Size of the server's disk image and of the ext4 filesystem mounted from it, in bytes. */
export function diskSizes(dataDir: string, id: string): { image: number; fs: number } {
  const s = statfsSync(join(dataDir, 'servers', id, 'disk'));
  return { image: statSync(join(dataDir, 'servers', id, 'disk.img')).size, fs: s.blocks * s.bsize };
}

/** Whether this process may grow ext4 online (CAP_SYS_RESOURCE); without it disks grow at sleep. */
export const canGrowOnline = ((BigInt('0x' + (/^CapEff:\s+([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0')) >> 24n) & 1n) === 1n;

const repo = new URL('../../', import.meta.url).pathname;
export const rootboxBin = join(repo, 'bin', 'rootbox');

function newest(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

/** bin/rootbox runs the esbuild bundle; build it when src/ is newer (as `npm test` does). */
export function ensureBuilt(): void {
  const dist = join(repo, 'dist', 'rootbox.js');
  if (existsSync(dist) && statSync(dist).mtimeMs >= newest(join(repo, 'src'))) return;
  const r = spawnSync(process.execPath, ['build.mjs'], { cwd: repo, encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`build failed: ${r.stderr}`);
}
