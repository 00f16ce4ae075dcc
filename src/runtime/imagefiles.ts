// The files a base image is given over what Debian installs: apt sources (the suite, its updates
// and its security archive), apt settings for a small disk, pip's, /root/www and /root/README.md.
// Their text is part of the recipe hash (image.ts), so changing one makes a new image.

import { chmodSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** Security updates come from Debian's own archive whatever mirror the rest comes from. */
export const SECURITY_MIRROR = 'http://deb.debian.org/debian-security';

export const sources = (suite: string, mirror: string): string => `# Debian ${suite}: the release, its updates and security fixes.
Types: deb
URIs: ${mirror}
Suites: ${suite} ${suite}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${SECURITY_MIRROR}
Suites: ${suite}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`;

/** How apt stores package lists: compressed and English-only (they ship in the image, and an
 *  `apt-get update` on the server's own disk then costs ~15 MB instead of ~150 MB). And ping:
 *  iputils-ping's postinst gives /usr/bin/ping cap_net_raw, which a server cannot have (no
 *  CAP_NET_RAW, no_new_privs), so exec would fail with EPERM; without the file capability ping
 *  uses an ICMP datagram socket, allowed by net.ipv4.ping_group_range (spec.ts). */
export const APT_BASE = `// rootbox: package lists stay compressed; no translations.
Acquire::GzipIndexes "true";
Acquire::CompressionTypes::Order:: "gz";
Acquire::Languages "none";
// rootbox: ping works through ICMP datagram sockets; a file capability would make it unrunnable.
DPkg::Post-Invoke { "setcap -r /usr/bin/ping 2>/dev/null || true"; };
`;

/** What apt keeps on the server's disk: no downloaded .debs and no binary caches. */
export const APT_SMALL_DISK = `// rootbox: the server's disk is small, so apt keeps nothing it can fetch or rebuild again:
// no downloaded packages, no pkgcache.bin/srcpkgcache.bin, and no recommended extras.
Binary::apt::APT::Keep-Downloaded-Packages "false";
APT::Keep-Downloaded-Packages "false";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Install-Recommends "false";
`;

/** The server is the user's own: `pip install` works system-wide as well as in a venv. */
export const PIP_CONF = `[global]
break-system-packages = true
`;

export const ROOT_README = `# Your rootbox server

Publish a site (one address, two ways):
- Static files: put them in /root/www (index.html is served at /). They are served straight
  from the disk, even while the server sleeps.
- An app: make /root/run.sh executable and have it start a server on 0.0.0.0:80, e.g.
      #!/bin/sh
      exec python3 -m http.server 80 --directory /root/www
  It starts within about a second, is restarted when it exits, and a changed run.sh replaces
  the running one. While run.sh exists, the app answers instead of /root/www.
  Its output goes to /var/log/run.sh.log.

Sleep: after a few minutes with no request, SSH session or open connection the server sleeps
(its processes stop); the next request or SSH login wakes it.
- What survives: every file on the disk, and /root/run.sh, which is started again at every wake.
- What does not: processes started over SSH (nohup, tmux, screen, &) stop when the server
  sleeps and do not come back. Anything that must keep running belongs in run.sh.

The system itself is a shared read-only layer: your disk holds only what you add or change.
apt-get install works without apt-get update (run it first if a download fails) and keeps no
.deb files; pip installs system-wide or into a venv (python3 -m venv v).
`;

/** Files written into the rootfs before the packages are installed (apt reads them). */
export function preInstall(root: string, suite: string, mirror: string, resolv: string): void {
  put(root, 'etc/apt/sources.list.d/debian.sources', sources(suite, mirror));
  rmSync(join(root, 'etc/apt/sources.list'), { force: true });
  put(root, 'etc/apt/apt.conf.d/90rootbox', APT_BASE);
  // debootstrap's uncompressed lists go: apt fetches them again and keeps them compressed
  for (const f of readdirSync(join(root, 'var/lib/apt/lists'))) {
    if (f !== 'partial' && f !== 'lock') rmSync(join(root, 'var/lib/apt/lists', f), { recursive: true, force: true });
  }
  put(root, 'etc/resolv.conf', resolv);
  put(root, 'usr/sbin/policy-rc.d', '#!/bin/sh\n# image build: start no services\nexit 101\n', 0o755);
}

/** Files written over the installed system: sane defaults a fresh server starts with. */
export function postInstall(root: string, resolv: string): void {
  rmSync(join(root, 'usr/sbin/policy-rc.d'), { force: true });
  put(root, 'etc/apt/apt.conf.d/91rootbox-small-disk', APT_SMALL_DISK);
  put(root, 'etc/pip.conf', PIP_CONF);
  put(root, 'etc/hosts', '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n');
  put(root, 'etc/hostname', 'rootbox\n');
  put(root, 'etc/resolv.conf', resolv);
  put(root, 'etc/default/locale', 'LANG=C.UTF-8\n');
  mkdirSync(join(root, 'root'), { recursive: true, mode: 0o700 });
  chmodSync(join(root, 'root'), 0o700);
  mkdirSync(join(root, 'root/www'), { recursive: true, mode: 0o755 });
  put(root, 'root/README.md', ROOT_README);
  // nothing downloaded stays: no .debs, no binary caches; the package lists do stay
  const archives = join(root, 'var/cache/apt/archives');
  rmSync(archives, { recursive: true, force: true });
  mkdirSync(join(archives, 'partial'), { recursive: true });
  for (const f of readdirSync(join(root, 'var/cache/apt'))) if (f.endsWith('.bin')) rmSync(join(root, 'var/cache/apt', f), { force: true });
  rmSync(join(root, 'var/lib/apt/lists/partial'), { recursive: true, force: true });
  mkdirSync(join(root, 'var/lib/apt/lists/partial'), { recursive: true });
  rmSync(join(root, 'root/.npm'), { recursive: true, force: true });
  rmSync(join(root, 'root/.cache'), { recursive: true, force: true });
}

/** Every text above, for the recipe hash. */
export const FILES_TEXT = [sources('SUITE', 'MIRROR'), APT_BASE, APT_SMALL_DISK, PIP_CONF, ROOT_README].join('\0');

function put(root: string, rel: string, text: string, mode = 0o644): void {
  const p = join(root, rel);
  mkdirSync(dirname(p), { recursive: true });
  rmSync(p, { force: true }); // may be a symlink (resolv.conf): never write through it
  writeFileSync(p, text, { mode });
  chmodSync(p, mode);
}
