// `rootbox doctor`: checks the host for everything the runtime needs and prints a table of what
// is there, what is missing and how to get it. Exit code 1 when a required check fails.

import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { release } from 'node:os';
import { relative, resolve } from 'node:path';
import { acmeFacts } from '../acme/index.js';
import type { Config } from '../config/index.js';
import {
  checkoutRoot,
  findImage,
  imageBuildCommand,
  imageOptions,
  keptAside,
  lostFoundDir,
  nativeBinary,
  recipeHash,
  traverseAdvice,
  untraversable,
  type NativeProgram,
} from '../runtime/index.js';
import { formatChecks, type Check } from './checks.js';
import { addonChecks, nodeRuntimeCheck } from './noderuntime.js';

const run = (cmd: string, args: string[]) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 10_000 });
  return { ok: r.status === 0, out: `${r.stdout ?? ''}${r.stderr ?? ''}`.trim(), missing: (r.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT' };
};
const read = (p: string) => {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
};
const APT = 'apt-get install -y';

export function hostChecks(): Check[] {
  const checks: Check[] = [];
  const add = (c: Check) => checks.push(c);
  const root = process.getuid?.() === 0;
  add({
    name: 'root',
    required: true,
    ok: root,
    detail: root ? 'running as root' : `uid ${process.getuid?.()}`,
    fix: 'run rootbox as root (the systemd unit does)',
  });
  const runc = run('runc', ['--version']);
  add({ name: 'runc', required: true, ok: runc.ok, detail: runc.ok ? runc.out.split('\n')[0] : 'not found', fix: `${APT} runc` });
  const fs = read('/proc/filesystems');
  add({
    name: 'overlayfs',
    required: true,
    ok: /\boverlay\b/.test(fs),
    detail: /\boverlay\b/.test(fs) ? 'overlay in /proc/filesystems' : 'overlay not registered',
    fix: 'modprobe overlay',
  });
  const loop = existsSync('/dev/loop-control');
  add({ name: 'loop devices', required: true, ok: loop, detail: loop ? '/dev/loop-control present' : '/dev/loop-control missing', fix: 'modprobe loop' });
  const userns = Number(read('/proc/sys/user/max_user_namespaces').trim() || '0');
  add({ name: 'user namespaces', required: true, ok: userns > 0, detail: `max_user_namespaces=${userns}`, fix: 'sysctl -w user.max_user_namespaces=15000' });
  const [maj, min] = release()
    .split('.')
    .map((n) => parseInt(n, 10));
  const idmap = maj > 5 || (maj === 5 && min >= 12);
  add({
    name: 'idmapped mounts',
    required: true,
    ok: idmap,
    detail: `kernel ${release()}${idmap ? ' (mount_setattr available)' : ' is older than 5.12'}`,
    fix: 'use a kernel >= 5.12',
  });
  const nft = run('nft', ['list', 'tables']);
  add({
    name: 'nftables',
    required: true,
    ok: nft.ok,
    detail: nft.ok ? 'nft works' : nft.missing ? 'nft not found' : nft.out.slice(0, 120),
    fix: `${APT} nftables`,
  });
  const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
  const v1 = ['memory', 'pids', 'cpu'].every((c) => existsSync(`/sys/fs/cgroup/${c}`));
  add({
    name: 'cgroups',
    required: true,
    ok: v1 || v2,
    detail: v2 ? 'cgroup v2' : v1 ? 'cgroup v1 (memory, pids, cpu)' : 'memory/pids/cpu controllers not mounted',
    fix: 'mount the cgroup controllers (systemd does)',
  });
  const ip = run('ip', ['-V']);
  add({ name: 'iproute2', required: true, ok: ip.ok, detail: ip.ok ? ip.out : 'ip not found', fix: `${APT} iproute2` });
  const mkfs = run('mkfs.ext4', ['-V']);
  add({ name: 'mkfs.ext4', required: true, ok: mkfs.ok, detail: mkfs.ok ? mkfs.out.split('\n')[0] : 'not found', fix: `${APT} e2fsprogs` });
  const tini = existsSync('/usr/bin/tini-static') || existsSync('/usr/bin/tini');
  add({ name: 'tini', required: true, ok: tini, detail: tini ? 'present' : 'not found', fix: `${APT} tini` });
  const cc = run('cc', ['--version']);
  add({
    name: 'C compiler',
    required: false,
    ok: cc.ok,
    detail: cc.ok ? cc.out.split('\n')[0] : 'cc not found (`npm run build` compiles the native helpers with it)',
    fix: `${APT} gcc libc6-dev`,
  });
  add(nativeCheck('idmapped-mount helper', 'rbx-idmount', true));
  add(nativeCheck('exec wrapper', 'rbx-exec', false));
  add(nativeCheck('host-name lock helper', 'rbx-lock', true));
  add(nativeCheck('checkpoint freeze helper', 'rbx-freeze', false));
  const nsenter = run('nsenter', ['--version']);
  add({
    name: 'nsenter',
    required: true,
    ok: nsenter.ok,
    detail: nsenter.ok ? nsenter.out : "not found (configures a container's eth0 from the host)",
    fix: `${APT} util-linux`,
  });
  const resize = run('resize2fs', []);
  add({ name: 'resize2fs', required: true, ok: !resize.missing, detail: resize.missing ? 'not found' : 'present', fix: `${APT} e2fsprogs` });
  const capEff = BigInt('0x' + (/^CapEff:\s+([0-9a-f]+)$/m.exec(read('/proc/self/status'))?.[1] ?? '0'));
  const sysResource = ((capEff >> 24n) & 1n) === 1n;
  add({
    name: 'online disk growth',
    required: false,
    ok: sysResource,
    detail: sysResource ? 'CAP_SYS_RESOURCE held' : "no CAP_SYS_RESOURCE: a grown disk is resized at the server's next sleep",
    fix: 'run rootbox with CAP_SYS_RESOURCE (plain root has it)',
  });
  // the servers' own limits in free/top/uptime (lxcfs.ts): optional, servers start without them
  const fuse = existsSync('/dev/fuse') && /\bfuse\b/.test(fs);
  const noView = "servers start, but free, top, uptime and /proc/meminfo inside show the host's figures";
  add({
    name: 'FUSE',
    required: false,
    ok: fuse,
    detail: fuse ? '/dev/fuse present' : `/dev/fuse missing: ${noView}`,
    fix: 'modprobe fuse (in a container: give it /dev/fuse)',
  });
  const lx = run('lxcfs', ['--version']);
  const lxVersion = lx.out.replace(/"/g, '').split('\n')[0];
  add({ name: 'lxcfs', required: false, ok: lx.ok && !lx.missing, detail: lx.ok ? `lxcfs ${lxVersion}` : `not installed: ${noView}`, fix: `${APT} lxcfs` });
  const deb = run('debootstrap', ['--version']);
  add({ name: 'debootstrap', required: false, ok: deb.ok, detail: deb.ok ? deb.out : 'not found (needed to build the base image)', fix: `${APT} debootstrap` });
  return checks;
}

/** A C helper built from its current source (native.ts); the exec wrapper is optional (without it a signal death reads as exit 128+n). */
function nativeCheck(name: string, program: NativeProgram, required: boolean): Check {
  try {
    const b = nativeBinary(program);
    const detail = b.built ? b.path : `${relative(b.root, b.path)} missing (not built from the current ${relative(b.root, b.source)})`;
    return { name, required, ok: b.built, detail, fix: `npm run build (in ${b.root})` };
  } catch (e) {
    return { name, required, ok: false, detail: (e as Error).message, fix: 'run rootbox from its checkout (bin/rootbox)' };
  }
}

/** With ACME configured: the host certificate's state. Required once there is no certificate to serve or it expires within a week. */
export function acmeCheck(cfg: Readonly<Pick<Config, 'dataDir' | 'https'>>, now = Date.now()): Check | undefined {
  const a = acmeFacts(cfg, now);
  if (!a.configured) return undefined;
  const fix = 'see the daemon log (ACME …) and the https.acme.dns settings; it retries by itself';
  const expiry = a.not_after ? `expires ${a.not_after} (${a.days_left} days)` : 'no certificate yet';
  if (!a.last_error) return { name: 'ACME certificate', required: false, ok: a.state === 'active', detail: `${a.state}, ${expiry}`, fix };
  const urgent = !a.not_after || Date.parse(a.not_after) - now < 7 * 86_400_000;
  const kept = a.not_after ? '; still serving the previous certificate' : '';
  return { name: 'ACME certificate', required: urgent, ok: false, detail: `renewal failed ${a.failures}x: ${a.last_error}${kept}; ${expiry}`, fix };
}

/** Cluster mode (issue 38): disks of servers now placed on another host that this host kept aside
 *  at start because they held writes newer than their newest checkpoint; none: no row. */
export function keptAsideCheck(cfg: Readonly<Pick<Config, 'dataDir'>>): Check | undefined {
  const kept = keptAside(cfg.dataDir);
  if (!kept.length) return undefined;
  const what = kept
    .map((k) => `${k.server} (${k.slug}, now on ${k.placedOn ?? 'another host'}, written ${new Date(k.diskWrittenAt).toISOString()})`)
    .join('; ');
  return {
    name: 'disks kept aside',
    required: false,
    ok: false,
    detail: `${kept.length} disk(s) of servers that moved while this host was away hold writes newer than their newest checkpoint: ${what}`,
    fix: `look at them in ${lostFoundDir(cfg.dataDir)} (mount -o loop,ro <image>; files owned from the note's uidBase), tell their owners, then delete them`,
  };
}

/** `extra`: rows other parts checked (payments). */
export function runDoctor(cfg: Readonly<Config>, extra: Check[] = []): number {
  const root = checkoutRoot();
  const checks = [nodeRuntimeCheck(root), ...addonChecks(root), ...hostChecks()];
  const img = imageOptions(cfg);
  const built = findImage(img);
  checks.push({
    name: 'base image',
    required: true,
    ok: !!built,
    detail: built ?? `${img.name} (recipe ${recipeHash()}) not built in ${img.imageDir}`,
    fix: imageBuildCommand(cfg),
  });
  for (const [what, dir, self] of [
    ['data dir', cfg.dataDir, false], // the daemon adds o+x to the data dir itself
    ['image dir', img.imageDir, true],
  ] as const) {
    const bad = untraversable(dir, self);
    checks.push({
      name: `${what} reachable`,
      required: true,
      ok: bad.length === 0,
      detail: bad.length ? traverseAdvice(what, dir, bad) : `${resolve(dir)}: every ancestor has o+x`,
      fix: `chmod o+x ${bad.join(' ')}`,
    });
  }
  const acme = acmeCheck(cfg);
  if (acme) checks.push(acme);
  const kept = keptAsideCheck(cfg);
  if (kept) checks.push(kept);
  checks.push(...extra);
  process.stdout.write(formatChecks(checks) + '\n');
  const bad = checks.filter((c) => c.required && !c.ok);
  process.stdout.write(bad.length ? `\n${bad.length} required check(s) failed.\n` : '\nall required checks passed.\n');
  return bad.length ? 1 : 0;
}
