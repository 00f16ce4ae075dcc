// The exec wrapper: rbx-exec (native/rbx-exec.c, built static by `npm run build` into dist/bin,
// see native.ts) tells a command killed by a signal apart from one that exited with 128+n, which
// `runc exec` cannot. Its binary is copied, under its hashed name, into the init directory that
// every container already has bind-mounted read-only at /run/rootbox, so containers made before it
// existed see it too; copies of older builds are removed there (syncInitFiles then drops them from
// each server's own copy). `run` mode wraps the command inside a server and reports on fd 3;
// `relay` mode, on the host, hands fd 3 of PTY execs over the daemon's abstract unix socket.
// The report is only a hint about the session's own command: a process inside the server could
// forge one for its own session, nothing more (the socket reaches nothing else).

import { copyFileSync, chmodSync, existsSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { nativeBinary, notBuilt } from './native.js';

/**
 * Puts the wrapper built from its current source into the init directory; returns its host path
 * there, or undefined when it is not built (execs then run unwrapped: a signal death reads as
 * exit 128+n) after telling `onError` which command builds it.
 */
export function ensureExecWrapper(initDir: string, onError: (e: Error) => void, root?: string): string | undefined {
  let b: ReturnType<typeof nativeBinary>;
  try {
    b = nativeBinary('rbx-exec', root);
  } catch (e) {
    onError(e as Error);
    return undefined;
  }
  if (!b.built) {
    onError(new Error(`the exec wrapper is not built: ${notBuilt(b)}`));
    return undefined;
  }
  const name = basename(b.path);
  const dst = join(initDir, name);
  if (!existsSync(dst)) {
    const tmp = `${dst}.${process.pid}.tmp`;
    try {
      copyFileSync(b.path, tmp);
      chmodSync(tmp, 0o755);
      renameSync(tmp, dst);
    } catch (e) {
      rmSync(tmp, { force: true });
      onError(e as Error);
      return undefined;
    }
  }
  for (const old of readdirSync(initDir)) if (old.startsWith('rbx-exec-') && old !== name) rmSync(join(initDir, old), { force: true });
  return dst;
}
