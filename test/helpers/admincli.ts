// An operator command of bin/rootbox (servers, accounts, status, cluster, ...) run in the test's
// own process: adminMain with its configuration loaded from `env` as the command line's would be,
// its output captured. Answers what run() answers for bin/rootbox: the exit code (a throw is 1,
// its detail on stderr, as src/cli.ts writes it), stdout and stderr. A file that checks the command
// line itself still runs bin/rootbox for it (the bundle, the dispatch, doctor).

import { adminMain } from '../../src/admin/index.js';

export async function adminCli(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const io = { out: (t: string) => (stdout += t + '\n'), err: (t: string) => (stderr += t + '\n') };
  const code = await adminMain(args, io, env).catch((e: Error & { detail?: string }) => ((stderr += `rootbox: ${e.detail ?? e.stack}\n`), 1));
  return { code, stdout, stderr };
}
