// The OCI runtime spec (bundle/config.json) of one server.
//
// Isolation, in order of what it stops:
// - user namespace: container ids 0..65535 map to the server's own host range (uidBase…); root
//   inside is an unprivileged host uid that owns nothing outside its own files. It and the network
//   namespace are the server's own, kept while it sleeps (network.ts) and joined at every start;
// - no_new_privs; capabilities trimmed to what a root user administering a Debian system needs:
//     CHOWN, DAC_OVERRIDE, FOWNER, FSETID (file ownership and modes, apt/dpkg),
//     SETUID, SETGID, SETPCAP, SETFCAP (switching users: su, sshd-style privilege drop; dpkg file caps),
//     KILL (signal any process of the server), NET_BIND_SERVICE (listen on :80), SYS_CHROOT.
//   Not granted: SYS_ADMIN, NET_ADMIN (no re-addressing or spoofing), NET_RAW (ping uses ICMP
//   datagram sockets through net.ipv4.ping_group_range instead), MKNOD, SYS_PTRACE, AUDIT_*,
//   SYS_MODULE, SYS_TIME, SYS_RAWIO, SYS_BOOT, SYS_RESOURCE, …;
// - seccomp deny list (seccomp.ts); masked and read-only /proc and /sys paths;
// - cgroups: memory limit = tier RAM ceiling (the OOM killer acts inside the server's cgroup),
//   pids limit, cpu shares; oom_score_adj 500 so under host pressure servers go before the daemon.
//
// The server's own limits in view: lxcfs's /proc files (lxcfs.ts) are bound over /proc/meminfo,
// cpuinfo, stat, uptime, loadavg, diskstats and swaps, so free/top/uptime answer from the server's
// cgroup; /sys/fs/cgroup is the server's own cgroups (memory, cpu, cpuacct, pids), read-only, so it can
// read its memory limit, usage and OOM counter. The masked directories get an empty read-only
// tmpfs without a size (statfs reports 0 blocks, so `df` lists only the server's own
// filesystems, not tmpfs mounts the size of the host's memory). Every tmpfs has an inode count
// of its own (nr_inodes), not one derived from the host's memory (`df -i`). The device files come
// from the daemon's sizeless devices tmpfs, not the host's devtmpfs (devices.ts).
//
// Nothing the server can read names a host path: its /proc/self/mountinfo shows the overlay root
// with relative upper/work (helper.ts) and the init bind from the server's own disk (disk.ts
// syncInitFiles), whose path on that filesystem is just `/init`.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { RuntimeConfig } from '../config/index.js';
import { DEVICES, devSkel } from './devices.js';
import { seccompProfile } from './seccomp.js';
import { LXCFS_PROC_FILES } from './lxcfs.js';
import { INIT_ARGS, INIT_MOUNT } from './supervisor.js';

export const CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_SETUID',
  'CAP_SETGID',
  'CAP_SETPCAP',
  'CAP_SETFCAP',
  'CAP_KILL',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
];

export const CONTAINER_ENV = ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'HOME=/root', 'LANG=C.UTF-8', 'TERM=xterm-256color'];

export interface SpecInput {
  id: string;
  /** The server's cgroup path (cgroupPath). */
  cgroup: string;
  slug: string;
  rootfs: string;
  uidBase: number;
  memoryBytes: number;
  /** Host directory bind-mounted read-only at /run/rootbox: the server's own copy of the init
   *  files on its disk (DiskPaths.init), never the shared <dataDir>/runtime/init. */
  initDir: string;
  limits: Pick<RuntimeConfig, 'pidsLimit' | 'cpuShares'>;
  /** The daemon's devices tmpfs (devices.ts mountDevices): the server's device files and /dev
   *  links, instead of runc's binds of the host's devtmpfs. */
  devDir: string;
  /** Host directory whose proc/<file> are lxcfs's (or placeholders): ensureLxcfsDir. Without it
   *  the server sees the host's /proc figures. */
  lxcfsDir?: string;
  /** The server's kept user and network namespaces (network.ts ensureNamespaces), joined instead
   *  of made: the uid map and eth0 are already there. Without them runc makes both (and the
   *  caller wires the network). */
  ns?: { user: string; net: string };
}

/** Host information a server never reads: files get /dev/null, directories an empty tmpfs. The
 *  block-device lists (/proc/partitions, /sys/block and its aliases) would name the host's disks
 *  and every other server's loop device with its size. */
const MASKED_FILES = ['/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list', '/proc/timer_stats', '/proc/sched_debug', '/proc/partitions'];
/** Masked by an explicit tmpfs of no size (see the header) where the host has them; runc's own
 *  masking (maskedPaths, which skips absent paths) otherwise. */
const MASKED_DIRS = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/scsi',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
  '/sys/block',
  '/sys/class/block',
  '/sys/dev/block',
  '/sys/devices/virtual/block',
];

/** The cgroup of server `id` on this daemon: `/<runtime.nftTable>/<id>`. The parent is the daemon's
 *  own, named after its nft table, which the host-name locks keep to one live daemon (locks.ts):
 *  two daemons of one machine (tests, or a move between them) never share a server's cgroup, so
 *  a halt's cgroup kill, a freeze or the watchdog's kill of one never reaches the other's
 *  processes. The default table `rootbox` gives `/rootbox/<id>`, the path of every release before. */
export const cgroupPath = (cfg: Pick<RuntimeConfig, 'nftTable'>, id: string) => `/${cfg.nftTable}/${id}`;

/** Inodes of the server's 64 MiB tmpfs mounts (one per page) and of the sizeless ones (a few
 *  mount points): without nr_inodes a tmpfs gets half the host's memory pages, which `df -i`
 *  shows. */
const INODES = 'nr_inodes=16384';
const NO_INODES = 'nr_inodes=16';

const CGROUP_V2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
const RO = ['bind', 'ro', 'nosuid', 'noexec', 'nodev'];

/** The server's own cgroups, read-only: binds of its cgroup directories (runc makes them before it
 *  opens the mount sources; the cgroup namespace shows them as `/`, no host path). On cgroup v1
 *  the controllers sit on a sizeless tmpfs: runc's own `cgroup` mount puts them on a tmpfs the
 *  size of half the host's memory, which df lists. */
function cgroupMounts(cgroup: string): Record<string, unknown>[] {
  if (CGROUP_V2) return [{ destination: '/sys/fs/cgroup', type: 'bind', source: `/sys/fs/cgroup${cgroup}`, options: RO }];
  return [
    { destination: '/sys/fs/cgroup', type: 'tmpfs', source: 'tmpfs', options: ['ro', 'nosuid', 'noexec', 'nodev', 'size=0', NO_INODES, 'mode=755'] },
    ...['memory', 'cpu', 'cpuacct', 'pids']
      .filter((c) => existsSync(`/sys/fs/cgroup/${c}`))
      .map((c) => ({ destination: `/sys/fs/cgroup/${c}`, type: 'bind', source: `/sys/fs/cgroup/${c}${cgroup}`, options: RO })),
  ];
}

/** /dev: the server's own tmpfs, holding the links of the skel bind under it (tmpcopyup), the
 *  device files bound from the daemon's devices tmpfs (devices.ts tells why). */
function devMounts(devDir: string): Record<string, unknown>[] {
  return [
    // not `ro`: runc remounts whatever is at /dev in the end read-only when a /dev mount asks for ro
    { destination: '/dev', type: 'bind', source: devSkel(devDir), options: ['bind', 'nosuid', 'noexec', 'nodev'] },
    { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k', INODES, 'tmpcopyup'] },
    { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
    { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k', INODES] },
    { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
    ...DEVICES.map(([name]) => ({ destination: `/dev/${name}`, type: 'bind', source: join(devDir, name), options: ['bind', 'nosuid', 'noexec'] })),
  ];
}

export function ociSpec(s: SpecInput): Record<string, unknown> {
  const caps = CAPABILITIES;
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: INIT_ARGS,
      env: CONTAINER_ENV,
      cwd: '/root',
      capabilities: { bounding: caps, effective: caps, permitted: caps, inheritable: [], ambient: [] },
      noNewPrivileges: true,
      oomScoreAdj: 500,
    },
    root: { path: s.rootfs, readonly: false },
    hostname: s.slug,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
      ...devMounts(s.devDir),
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/run', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=755', 'size=65536k', INODES] },
      { destination: INIT_MOUNT, type: 'bind', source: s.initDir, options: ['bind', 'ro', 'nosuid', 'nodev'] },
      ...cgroupMounts(s.cgroup),
      ...MASKED_DIRS.filter((d) => existsSync(d)).map((d) => ({
        destination: d,
        type: 'tmpfs',
        source: 'tmpfs',
        options: ['ro', 'nosuid', 'nodev', 'noexec', 'size=0', NO_INODES, 'mode=555'],
      })),
      ...(s.lxcfsDir
        ? LXCFS_PROC_FILES.map((f) => ({
            destination: `/proc/${f}`,
            type: 'bind',
            source: `${s.lxcfsDir}/proc/${f}`,
            options: ['bind', 'ro', 'nosuid', 'nodev', 'noexec'],
          }))
        : []),
    ],
    linux: {
      uidMappings: [{ containerID: 0, hostID: s.uidBase, size: 65536 }],
      gidMappings: [{ containerID: 0, hostID: s.uidBase, size: 65536 }],
      namespaces: [
        { type: 'pid' },
        s.ns ? { type: 'network', path: s.ns.net } : { type: 'network' },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
        s.ns ? { type: 'user', path: s.ns.user } : { type: 'user' },
        { type: 'cgroup' },
      ],
      cgroupsPath: s.cgroup,
      resources: {
        devices: [{ allow: false, access: 'rwm' }],
        memory: { limit: s.memoryBytes },
        pids: { limit: s.limits.pidsLimit },
        cpu: { shares: s.limits.cpuShares },
      },
      sysctl: { 'net.ipv4.ping_group_range': '0 65535' },
      seccomp: seccompProfile(),
      maskedPaths: [...MASKED_FILES, ...MASKED_DIRS.filter((d) => !existsSync(d))],
      readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
    },
  };
}
