// A real PostgreSQL for the cluster tests (Debian's server, DESIGN part 6): initdb in a fresh
// temp dir as the `postgres` user, its own port on 127.0.0.1 and its own socket dir, password
// (scram) authentication for the `rootbox` role. stop() ends it and removes everything;
// kill() is a crash (SIGKILL of the postmaster); start() brings the same cluster back.

import { chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { freePort } from './ports.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from './run.js';

const BIN = '/usr/lib/postgresql/15/bin';

export interface TestPostgres {
  url: string;
  port: number;
  password: string;
  dir: string;
  /** Starts the cluster again (after kill or halt). */
  start(): Promise<void>;
  /** Stops it cleanly (fast shutdown), keeping its data. */
  halt(): Promise<void>;
  /** SIGKILL of the postmaster: a crash. */
  kill(): Promise<void>;
  /** psql -c as the superuser; answers stdout. */
  sql(statement: string): Promise<string>;
  /** Stops it and removes its directory. */
  stop(): Promise<void>;
}

async function must(cmd: string, args: string[], what: string): Promise<string> {
  const r = await run(cmd, args, { timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`${what} failed (${r.code}): ${r.stderr || r.stdout}`);
  return r.stdout;
}

const pgUid = () => Number(readFileSync('/etc/passwd', 'utf8').match(/^postgres:[^:]*:(\d+):(\d+):/m)?.[1] ?? NaN);
const pgGid = () => Number(readFileSync('/etc/passwd', 'utf8').match(/^postgres:[^:]*:(\d+):(\d+):/m)?.[2] ?? NaN);

export async function startPostgres(): Promise<TestPostgres> {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-pg-'));
  chownSync(dir, pgUid(), pgGid());
  const data = join(dir, 'data');
  const password = 'pw-' + Math.random().toString(36).slice(2, 12);
  const pwfile = join(dir, 'pw');
  writeFileSync(pwfile, password + '\n', { mode: 0o600 });
  chownSync(pwfile, pgUid(), pgGid());
  const as = (args: string[]) => ['-u', 'postgres', '--', ...args];
  const port = await freePort();
  const pgctl = (verb: string, extra: string[] = []) =>
    must('runuser', as([`${BIN}/pg_ctl`, '-D', data, '-l', join(dir, 'log'), '-w', '-t', '30', ...extra, verb]), `pg_ctl ${verb}`);
  try {
    await must(
      'runuser',
      as([`${BIN}/initdb`, '-D', data, '-U', 'rootbox', `--pwfile=${pwfile}`, '--auth=scram-sha-256', '-E', 'UTF8', '--no-sync']),
      'initdb',
    );
    const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off`;
    const start = () => pgctl('start', ['-o', opts]).then(() => undefined);
    await start();
    const env = { ...process.env, PGPASSWORD: password };
    const pg: TestPostgres = {
      url: `postgres://rootbox:${password}@127.0.0.1:${port}/postgres`,
      port,
      password,
      dir,
      start,
      halt: () => pgctl('stop', ['-m', 'fast']).then(() => undefined),
      async kill() {
        const pid = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
        process.kill(pid, 'SIGKILL');
        await run('runuser', as([`${BIN}/pg_ctl`, '-D', data, 'status'])); // settles once the pid is gone
      },
      async sql(statement) {
        const r = await run('psql', ['-h', '127.0.0.1', '-p', String(port), '-U', 'rootbox', '-d', 'postgres', '-tA', '-c', statement], { env });
        if (r.code !== 0) throw new Error(`psql failed: ${r.stderr}`);
        return r.stdout.trim();
      },
      async stop() {
        await run('runuser', as([`${BIN}/pg_ctl`, '-D', data, '-m', 'immediate', '-w', 'stop']));
        rmSync(dir, { recursive: true, force: true });
      },
    };
    return pg;
  } catch (e) {
    await run('runuser', as([`${BIN}/pg_ctl`, '-D', data, '-m', 'immediate', '-w', 'stop']));
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}
