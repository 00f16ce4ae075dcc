// Base images: a Debian bookworm rootfs (debootstrap minbase, then the packages a user works with
// installed by apt inside it), versioned by a hash of its recipe and cached under
// <imageDir>/<name>-<hash>/rootfs. A build runs in a scratch dir beside the cache and is renamed
// into place only when complete, so a half-built image is never used; downloaded .debs are kept
// in <imageDir>/.debs for the next build. Images are never changed once built: every server
// records the image it was created from and keeps it as its lower layer (images.ts lists and
// prunes them).

import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { AppError } from '../errors.js';
import { FILES_TEXT, postInstall, preInstall } from './imagefiles.js';

/** What a user expects on a machine to work on; installed with apt (no recommends). */
export const IMAGE_PACKAGES = [
  'bash',
  'ca-certificates',
  'curl',
  'wget',
  'openssh-client',
  'openssh-sftp-server',
  'rsync',
  'tini',
  'locales',
  'python3',
  'python3-venv',
  'python3-pip',
  'git',
  'nano',
  'vim-tiny',
  'less',
  'zip',
  'unzip',
  'xz-utils',
  'jq',
  'sqlite3',
  'netcat-openbsd',
  'procps',
  'iproute2',
  'iputils-ping',
  'dnsutils',
  'build-essential',
  'nodejs',
  'npm',
] as const;

/** Everything that decides the image's content; its hash (with the files of imagefiles.ts) names
 *  the cache entry. Bump `rev` when the build steps below change. */
export const RECIPE = { suite: 'bookworm', variant: 'minbase', packages: IMAGE_PACKAGES, rev: 2 } as const;

export const recipeHash = (): string => createHash('sha256').update(JSON.stringify(RECIPE)).update(FILES_TEXT).digest('hex').slice(0, 12);

/** The first recipe's hash: servers created before records named their image all use it. */
export const LEGACY_HASH = 'd4eee5e7e12f';

export interface ImageOptions {
  imageDir: string;
  name: string;
  mirror: string;
}

/** `<name>-<hash>`: the directory of one built image, and what a server records. */
export const imageTag = (o: Pick<ImageOptions, 'name'>, hash = recipeHash()): string => `${o.name}-${hash}`;

export const tagRoot = (imageDir: string, tag: string): string => join(resolve(imageDir), tag, 'rootfs');

export const imageRoot = (o: Pick<ImageOptions, 'imageDir' | 'name'>): string => tagRoot(o.imageDir, imageTag(o));

/** Whether the image of `tag` is completely built (recipe.json is written last). */
export const isBuilt = (imageDir: string, tag: string): boolean => existsSync(join(resolve(imageDir), tag, 'recipe.json'));

/** The cached rootfs of the current recipe, or undefined when it has not been built. */
export function findImage(o: Pick<ImageOptions, 'imageDir' | 'name'>): string | undefined {
  return isBuilt(o.imageDir, imageTag(o)) ? imageRoot(o) : undefined;
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

export const resolvConf = (): string =>
  hostNameservers()
    .map((ip) => `nameserver ${ip}\n`)
    .join('');

/** Runs a build step, streaming its output lines to progress; rejects with the last lines. */
function step(cmd: string, args: string[], progress: (line: string) => void, env?: NodeJS.ProcessEnv): Promise<void> {
  return new Promise<void>((res, rej) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env });
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
    child.on('error', (e) =>
      rej(
        cmd === 'debootstrap'
          ? AppError.of('debootstrap_missing', `cannot run debootstrap (apt-get install -y debootstrap): ${e.message}`)
          : AppError.of('image_build_failed', `cannot run ${cmd} (apt-get install -y util-linux): ${e.message}`),
      ),
    );
    child.on('close', (code) => (code === 0 ? res() : rej(AppError.of('image_build_failed', `${cmd} exited with ${code}; last output:\n${tail}`))));
  });
}

/** apt inside the new rootfs: in a private mount and pid namespace (its /proc and the bind of
 *  the host's .deb cache vanish with it), chrooted, starting no services. */
function aptInside(rootfs: string, debs: string, progress: (line: string) => void): Promise<void> {
  const apt = '-o APT::Sandbox::User=root -o Binary::apt::APT::Keep-Downloaded-Packages=true -o APT::Keep-Downloaded-Packages=true';
  const inside = `set -e; apt-get ${apt} update; apt-get ${apt} install -y --no-install-recommends ${RECIPE.packages.join(' ')}`;
  const script = 'set -e; mount --bind "$1" "$2/var/cache/apt/archives"; exec chroot "$2" /bin/sh -c "$3"';
  const env = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root', LANG: 'C.UTF-8', DEBIAN_FRONTEND: 'noninteractive' };
  const args = [
    '--mount',
    '--propagation',
    'private',
    '--pid',
    '--fork',
    `--mount-proc=${join(rootfs, 'proc')}`,
    '/bin/sh',
    '-c',
    script,
    'apt-inside',
    debs,
    rootfs,
    inside,
  ];
  return step('unshare', args, progress, env);
}

/**
 * Returns the cached image or builds it. `progress` receives one line per build step
 * (debootstrap's `I: Retrieving …`, apt's `Unpacking …`), then the final path.
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
  mkdirSync(join(debs, 'partial'), { recursive: true });
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { recursive: true, mode: 0o755 });
  const rootfs = join(scratch, 'rootfs');
  const args = [`--variant=${RECIPE.variant}`, `--cache-dir=${debs}`, RECIPE.suite, rootfs, o.mirror];
  progress(`building image ${o.name} (recipe ${recipeHash()}): debootstrap ${args.join(' ')}`);
  const started = Date.now();
  try {
    await step('debootstrap', args, progress);
    preInstall(rootfs, RECIPE.suite, o.mirror, resolvConf());
    progress(`installing ${RECIPE.packages.length} packages with apt`);
    await aptInside(rootfs, debs, progress);
    postInstall(rootfs, resolvConf());
    const meta = {
      ...RECIPE,
      hash: recipeHash(),
      mirror: o.mirror,
      builtAt: new Date().toISOString(),
      buildSeconds: Math.round((Date.now() - started) / 1000),
    };
    writeFileSync(join(scratch, 'recipe.json'), JSON.stringify(meta, null, 2) + '\n');
    if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    renameSync(scratch, dir);
  } catch (e) {
    rmSync(scratch, { recursive: true, force: true });
    throw e;
  }
  progress(`image ${o.name} built in ${((Date.now() - started) / 1000).toFixed(0)} s at ${root}`);
  return root;
}

/** The config keys the image is found and built from. */
export type ImageSettings = { dataDir: string; runtime: { imageDir?: string; image: string; mirror: string } };

/** The image options of a loaded config: imageDir defaults to <dataDir>/images. */
export const imageOptions = (cfg: ImageSettings): ImageOptions => ({
  imageDir: resolve(cfg.runtime.imageDir ?? join(cfg.dataDir, 'images')),
  name: cfg.runtime.image,
  mirror: cfg.runtime.mirror,
});

/** The exact command that builds the image this config reads (the env pins both dirs whatever the config file says). */
export function imageBuildCommand(cfg: ImageSettings): string {
  const bin = process.argv[1] ? resolve(dirname(process.argv[1]), '..', 'bin', 'rootbox') : 'rootbox';
  const img = imageOptions(cfg);
  return `ROOTBOX_IMAGE_DIR=${resolve(img.imageDir)} ROOTBOX_IMAGE=${img.name} ${bin} image build`;
}
