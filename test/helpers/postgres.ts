// A real PostgreSQL for the cluster tests (Debian's server, DESIGN part 6): initdb in a fresh
// temp dir as the `postgres` user, its own port on 127.0.0.1 and its own socket dir, password
// (scram) authentication for the `rootbox` role. stop() ends it and removes everything;
// kill() is a crash (SIGKILL of the postmaster); start() brings the same cluster back.
// startStandby() makes a streaming standby of it that the primary waits for on every commit
// (synchronous_standby_names), and promote() turns that standby into a primary: both by the
// README guide's own script, contrib/registry-cluster.sh (its standby, sync and promote steps),
// given this cluster's data dir, a pg_ctl in place of pg_ctlcluster, and its port (its hba and
// primary steps run on the primary before its first standby).
// scripts/test.mjs runs initdb once per run (ROOTBOX_TEST_PG_TEMPLATE: a dir holding `data` and
// the password in `pw`); each cluster then starts from a copy of it instead of an initdb of its own.
// The clusters live in /dev/shm when there is one (base below).

import { appendFileSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.js';
import { run } from './run.js';

const BIN = '/usr/lib/postgresql/15/bin';
const SCRIPT = new URL('../../contrib/registry-cluster.sh', import.meta.url).pathname;

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
  /** psql -c as the rootbox superuser; answers stdout. */
  sql(statement: string): Promise<string>;
  /** Stops it and removes its directory. */
  stop(): Promise<void>;
  /** The guide's sync step here: synchronous_standby_names = setting once each name streams. */
  sync(setting: string, ...names: string[]): Promise<void>;
  /** Any step of the guide's script run for this cluster. */
  guide(...args: string[]): Promise<string>;
}

export interface TestStandby extends TestPostgres {
  /** The guide's promote step: the standby becomes a primary that takes writes, its
   *  synchronous_standby_names reset (or `sync`). */
  promote(sync?: string): Promise<void>;
  /** The guide's follow step: streams from `primary` (a promoted standby) under `name`. */
  follow(primary: TestPostgres, name: string): Promise<void>;
}

async function must(cmd: string, args: string[], what: string, env?: NodeJS.ProcessEnv): Promise<string> {
  const r = await run(cmd, args, { timeoutMs: 60_000, env });
  if (r.code !== 0) throw new Error(`${what} failed (${r.code}): ${r.stderr || r.stdout}`);
  return r.stdout;
}

const ids = () => {
  const m = readFileSync('/etc/passwd', 'utf8').match(/^postgres:[^:]*:(\d+):(\d+):/m);
  return { uid: Number(m?.[1]), gid: Number(m?.[2]) };
};
const as = (args: string[]) => ['-u', 'postgres', '--', ...args];

/** Where the clusters live: /dev/shm when there is one (tmpfs: copying the template and the
 *  server's own writes cost a tenth of the CPU and wall time they take on a busy disk), else the
 *  temp dir; ROOTBOX_TEST_PG_BASE chooses. scripts/test.mjs puts the run's initdb there too. */
const base = () => process.env.ROOTBOX_TEST_PG_BASE ?? (existsSync('/dev/shm') ? '/dev/shm' : tmpdir());

/** A dir of its own, owned by postgres, with the password in a file only postgres reads. */
function ownDir(password: string): string {
  const { uid, gid } = ids();
  const dir = mkdtempSync(join(base(), 'rbx-pg-'));
  chownSync(dir, uid, gid);
  writeFileSync(join(dir, 'pw'), password + '\n', { mode: 0o600 });
  chownSync(join(dir, 'pw'), uid, gid);
  return dir;
}

/** Control of one cluster in `dir` (data in dir/data) on `port`: dir/ctl is its pg_ctlcluster
 *  (start, stop, restart, promote), for the tests and for the guide's script alike. */
function control(dir: string, port: number, password: string): TestPostgres {
  const data = join(dir, 'data');
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off`;
  const { uid, gid } = ids();
  writeFileSync(join(dir, 'ctl'), `#!/bin/sh\nexec runuser -u postgres -- ${BIN}/pg_ctl -D ${data} -l ${join(dir, 'log')} -w -t 30 -o '${opts}' "$@"\n`, {
    mode: 0o755,
  });
  chownSync(join(dir, 'ctl'), uid, gid);
  const pgctl = (verb: string, extra: string[] = []) => must(join(dir, 'ctl'), [...extra, verb], `pg_ctl ${verb}`).then(() => undefined);
  const env = { ...process.env, PGPASSWORD: password };
  return {
    url: `postgres://rootbox:${password}@127.0.0.1:${port}/postgres`,
    port,
    password,
    dir,
    start: () => pgctl('start', ['-o', opts]),
    halt: () => pgctl('stop', ['-m', 'fast']),
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
    sync: (setting, ...names) => script(dir, port, password, ['sync', setting, ...names]).then(() => undefined),
    guide: (...args) => script(dir, port, password, args),
  };
}

/** The run's initdb (scripts/test.mjs), when there is one. */
function template(): { data: string; password: string } | undefined {
  const dir = process.env.ROOTBOX_TEST_PG_TEMPLATE;
  if (!dir || !existsSync(join(dir, 'data', 'PG_VERSION'))) return undefined;
  return { data: join(dir, 'data'), password: readFileSync(join(dir, 'pw'), 'utf8').trim() };
}

export async function startPostgres(): Promise<TestPostgres> {
  const made = template();
  const password = made?.password ?? 'pw-' + Math.random().toString(36).slice(2, 12);
  const dir = ownDir(password);
  const pg = control(dir, await freePort(), password);
  try {
    if (made) await must('cp', ['-a', made.data, join(dir, 'data')], 'copying the initdb template');
    else
      await must(
        'runuser',
        as([`${BIN}/initdb`, '-D', join(dir, 'data'), '-U', 'rootbox', `--pwfile=${join(dir, 'pw')}`, '--auth=scram-sha-256', '-E', 'UTF8', '--no-sync']),
        'initdb',
      );
    await pg.start();
    return pg;
  } catch (e) {
    await pg.stop();
    throw e;
  }
}

/** The guide's script run for the cluster in `dir` on `port` (its psql as rootbox over TCP). */
function script(dir: string, port: number, password: string, args: string[]): Promise<string> {
  const env = {
    ...process.env,
    DATA: join(dir, 'data'),
    PG_CTL: join(dir, 'ctl'),
    PGHOST: '127.0.0.1',
    PGPORT: String(port),
    PGUSER: 'rootbox',
    PGPASSWORD: password,
    BASEBACKUP_OPTS: '--no-sync',
    WAIT_S: '20',
  };
  return must('bash', [SCRIPT, ...args], `registry-cluster.sh ${args[0]}`, env);
}

const primaries = new Set<string>();

/** A streaming standby of `primary` that every commit of the primary waits for; `sync` sets the
 *  primary's synchronous_standby_names instead (e.g. 'ANY 1 (s1, s2)' for quorum commit). The
 *  guide's steps: `hba` and `primary` on the primary (once), `standby NAME PRIMARY PORT` here,
 *  then `sync SETTING NAME` on the primary. */
export async function startStandby(primary: TestPostgres, name = 'standby1', sync = name): Promise<TestStandby> {
  const dir = ownDir(primary.password);
  const sb = control(dir, await freePort(), primary.password);
  try {
    if (!primaries.has(primary.dir)) {
      // the guide's first steps on the primary, once (its restart costs only the tests with standbys)
      await primary.guide('hba', '127.0.0.1/32', '127.0.0.1');
      await primary.guide('primary', primary.password);
      primaries.add(primary.dir);
    }
    await script(dir, sb.port, primary.password, ['standby', name, '127.0.0.1', String(primary.port)]);
    await primary.sync(sync, name);
    return {
      ...sb,
      promote: (setting?: string) => script(dir, sb.port, primary.password, ['promote', ...(setting ? [setting] : [])]).then(() => undefined),
      follow: (to, as) => script(dir, sb.port, primary.password, ['follow', '127.0.0.1', String(to.port), as]).then(() => undefined),
    };
  } catch (e) {
    await sb.stop();
    throw e;
  }
}
