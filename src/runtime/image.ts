// Base images: a Debian bookworm rootfs built with debootstrap (minbase + the packages a root user
// expects), versioned by a hash of its recipe and cached under <imageDir>/<name>-<hash>/rootfs.
// A build runs in a scratch dir beside the cache and is renamed into place only when complete,
// so a half-built image is never used; downloaded .debs are kept in <imageDir>/.debs.

import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { AppError } from '../errors.js';

export const IMAGE_PACKAGES = [
  'bash', 'ca-certificates', 'curl', 'iproute2', 'iputils-ping', 'procps', 'less', 'nano',
  'python3-minimal', 'openssh-sftp-server', 'rsync', 'tini', 'locales',
] as const;

/** Everything that decides the image's content; its hash names the cache entry. Bump `rev` when
 *  the post-install steps below change. */
export const RECIPE = { suite: 'bookworm', variant: 'minbase', packages: IMAGE_PACKAGES, rev: 1 } as const;

export const recipeHash = (): string => createHash('sha256').update(JSON.stringify(RECIPE)).digest('hex').slice(0, 12);

export interface ImageOptions {
  imageDir: string;
  name: string;
  mirror: string;
}

export const imageRoot = (o: Pick<ImageOptions, 'imageDir' | 'name'>): string => join(resolve(o.imageDir), `${o.name}-${recipeHash()}`, 'rootfs');

/** The cached rootfs of the current recipe, or undefined when it has not been built. */
export function findImage(o: Pick<ImageOptions, 'imageDir' | 'name'>): string | undefined {
  const root = imageRoot(o);
  return existsSync(join(root, '..', 'recipe.json')) ? root : undefined;
}

export function hostNameservers(): string[] {
  let text = '';
  try {
    text = readFileSync('/etc/resolv.conf', 'utf8');
  } catch {
    /* no resolver configured */
  }
  const ns = [...text.matchAll(/^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/gm)].map((m) => m[1]).filter((ip) => !ip.startsWith('127.'));
  return ns.length ? ns : ['1.1.1.1', '8.8.8.8'];
}

export const resolvConf = (): string => hostNameservers().map((ip) => `nameserver ${ip}\n`).join('');

/** Files written over debootstrap's result: sane defaults a fresh server starts with. */
function postInstall(root: string): void {
  writeFileSync(join(root, 'etc/hosts'), '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n');
  writeFileSync(join(root, 'etc/hostname'), 'rootbox\n');
  writeFileSync(join(root, 'etc/resolv.conf'), resolvConf());
  writeFileSync(join(root, 'etc/default/locale'), 'LANG=C.UTF-8\n');
  mkdirSync(join(root, 'root'), { recursive: true, mode: 0o700 });
  for (const d of ['var/cache/apt/archives', 'var/lib/apt/lists']) {
    rmSync(join(root, d), { recursive: true, force: true });
    mkdirSync(join(root, d, 'partial'), { recursive: true });
  }
}

/**
 * Returns the cached image or builds it. `progress` receives one line per debootstrap step
 * (`I: Retrieving …`, `I: Unpacking …`), then the final path.
 */
export async function buildImage(o: ImageOptions, progress: (line: string) => void = () => {}, force = false): Promise<string> {
  const root = imageRoot(o);
  const dir = join(root, '..');
  if (!force && findImage(o)) {
    progress(`image ${o.name} (recipe ${recipeHash()}) already built at ${root}`);
    return root;
  }
  const scratch = `${dir}.build-${process.pid}`;
  const debs = join(resolve(o.imageDir), '.debs');
  mkdirSync(debs, { recursive: true });
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { recursive: true, mode: 0o755 });
  const args = [
    `--variant=${RECIPE.variant}`,
    `--include=${RECIPE.packages.join(',')}`,
    `--cache-dir=${debs}`,
    RECIPE.suite,
    join(scratch, 'rootfs'),
    o.mirror,
  ];
  progress(`building image ${o.name} (recipe ${recipeHash()}): debootstrap ${args.join(' ')}`);
  const started = Date.now();
  try {
    await new Promise<void>((res, rej) => {
      const child = spawn('debootstrap', args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let tail = '';
      const onLine = (chunk: Buffer) => {
        for (const line of chunk.toString('utf8').split('\n')) {
          if (!line.trim()) continue;
          tail = (tail + line + '\n').slice(-2000);
          progress(`  ${line.trim()}`);
        }
      };
      child.stdout.on('data', onLine);
      child.stderr.on('data', onLine);
      child.on('error', (e) => rej(AppError.of('debootstrap_missing', `cannot run debootstrap (apt-get install -y debootstrap): ${e.message}`)));
      child.on('close', (code) =>
        code === 0 ? res() : rej(AppError.of('image_build_failed', `debootstrap exited with ${code}; last output:\n${tail}`)),
      );
    });
    postInstall(join(scratch, 'rootfs'));
    writeFileSync(join(scratch, 'recipe.json'), JSON.stringify({ ...RECIPE, hash: recipeHash(), mirror: o.mirror, builtAt: new Date().toISOString() }, null, 2) + '\n');
    if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    renameSync(scratch, dir);
  } catch (e) {
    rmSync(scratch, { recursive: true, force: true });
    throw e;
  }
  progress(`image ${o.name} built in ${((Date.now() - started) / 1000).toFixed(0)} s at ${root}`);
  return root;
}

/** The image options of a loaded config: imageDir defaults to <dataDir>/images. */
export const imageOptions = (cfg: { dataDir: string; runtime: { imageDir?: string; image: string; mirror: string } }): ImageOptions => ({
  imageDir: resolve(cfg.runtime.imageDir ?? join(cfg.dataDir, 'images')),
  name: cfg.runtime.image,
  mirror: cfg.runtime.mirror,
});
