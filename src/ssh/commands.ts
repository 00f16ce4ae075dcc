// What runs inside the container for each kind of session, built like OpenSSH's sshd does it:
// root's shell from the container's /etc/passwd (a login shell for `shell`, `<shell> -c <cmd>`
// for `exec`), in /root, with a clean environment plus the LANG/LC_* the client sent, and the
// image's sftp-server for the `sftp` subsystem. Only sh builtins run before the real command.

import type { ExecOptions } from '../runtime/index.js';

/** Sets $s to root's shell from /etc/passwd (falls back to /bin/sh) using builtins only. */
const PICK_SHELL =
  's=; while IFS=: read -r n _ _ _ _ _ sh; do if [ "$n" = root ]; then s=$sh; break; fi; done </etc/passwd 2>/dev/null; ' +
  '[ -x "$s" ] || s=/bin/sh; export SHELL="$s"; ';

const SFTP_SERVERS = ['/usr/lib/openssh/sftp-server', '/usr/libexec/openssh/sftp-server', '/usr/lib/ssh/sftp-server', '/usr/libexec/sftp-server'];

/** Marks every process a session starts (inherited environment). */
export const SESSION_VAR = 'ROOTBOX_SSH_SESSION';

export interface SessionEnv {
  /** Client address and port, server address and port (SSH_CONNECTION). */
  connection: { clientIp: string; clientPort: number; serverIp: string; serverPort: number };
  /** Variables the client asked for with `env` requests (already filtered). */
  client: Record<string, string>;
  term?: string;
  /** Session mark (SESSION_VAR's value). */
  token: string;
}

const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export function baseEnv(e: SessionEnv): Record<string, string> {
  const c = e.connection;
  const env: Record<string, string> = {
    HOME: '/root',
    USER: 'root',
    LOGNAME: 'root',
    PATH,
    MAIL: '/var/mail/root',
    SSH_CLIENT: `${c.clientIp} ${c.clientPort} ${c.serverPort}`,
    SSH_CONNECTION: `${c.clientIp} ${c.clientPort} ${c.serverIp} ${c.serverPort}`,
    ...e.client,
    [SESSION_VAR]: e.token,
  };
  if (e.term) env.TERM = e.term;
  return env;
}

/** Variables a client may set (OpenSSH's default AcceptEnv: LANG LC_*), with sane values. */
export function acceptEnv(key: string, val: string): boolean {
  return (key === 'LANG' || /^LC_[A-Z_]{1,20}$/.test(key)) && val.length <= 256 && !/[\0\n]/.test(val);
}

export function shellCommand(e: SessionEnv): ExecOptions {
  return { argv: ['/bin/sh', '-c', `${PICK_SHELL}cd /root 2>/dev/null; exec "$s" -l`], env: baseEnv(e), cwd: '/root' };
}

export function execCommand(command: string, e: SessionEnv): ExecOptions {
  return { argv: ['/bin/sh', '-c', `${PICK_SHELL}exec "$s" -c "$1"`, 'sh', command], env: baseEnv(e), cwd: '/root' };
}

export function sftpCommand(e: SessionEnv): ExecOptions {
  const tries = SFTP_SERVERS.map((p) => `[ -x ${p} ] && exec ${p}; `).join('');
  return {
    argv: ['/bin/sh', '-c', `${tries}echo "rootbox: no sftp-server in this server's image (install openssh-sftp-server)" >&2; exit 127`],
    env: baseEnv(e),
    cwd: '/root',
  };
}
