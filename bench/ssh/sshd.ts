// A private OpenSSH sshd for the benchmark's same-run peer: its own config, host key, client key,
// port on 127.0.0.1 and data dir, started in the foreground (-D) and stopped by its PID.

import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';

export interface Sshd {
  port: number;
  keyFile: string;
  /** Directory the benchmark may write into on the host. */
  dir: string;
  stop(): Promise<void>;
}

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });

export async function startSshd(dir: string): Promise<Sshd> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  mkdirSync('/run/sshd', { recursive: true, mode: 0o755 }); // privilege separation dir sshd insists on
  const hostKey = join(dir, 'host_ed25519');
  const keyFile = join(dir, 'client_ed25519');
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', hostKey]);
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', keyFile]);
  const auth = join(dir, 'authorized_keys');
  execFileSync('cp', [`${keyFile}.pub`, auth]);
  const port = await freePort();
  const cfg = join(dir, 'sshd_config');
  writeFileSync(
    cfg,
    [
      `Port ${port}`,
      'ListenAddress 127.0.0.1',
      `HostKey ${hostKey}`,
      `AuthorizedKeysFile ${auth}`,
      `PidFile ${join(dir, 'sshd.pid')}`,
      'PermitRootLogin prohibit-password',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'UsePAM no',
      'StrictModes no',
      'Subsystem sftp /usr/lib/openssh/sftp-server',
      'LogLevel ERROR',
      '',
    ].join('\n'),
  );
  const child: ChildProcess = spawn('/usr/sbin/sshd', ['-D', '-e', '-f', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr?.on('data', (d) => (err += d));
  // Wait until it accepts connections.
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) throw new Error(`sshd exited: ${err}`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), resolve(true)));
      s.once('error', () => resolve(false));
    });
    if (ok) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port,
    keyFile,
    dir,
    async stop() {
      if (child.exitCode === null && child.pid) {
        process.kill(child.pid, 'SIGTERM');
        await new Promise((r) => child.once('exit', r));
      }
    },
  };
}
