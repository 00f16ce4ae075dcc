// A daemon in cluster mode against a real PostgreSQL: `rootbox cluster init` (the CLI) prepares
// the registry, the daemon registers itself and `rootbox cluster status` shows it up with its
// advertised address and capacity, and down as soon as it stops; a daemon refuses to start on a
// registry nobody initialised; `config show` and the daemon's log never carry the password nor
// the cluster token (init printed it once and wrote it to the token file the daemon reads).
process.env.ROOTBOX_TEST_RUNTIME ??= 'process'; // what is tested here needs no container
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isAppError } from '../../src/errors.js';
import { KNOWN_VERSION, MIGRATIONS } from '../../src/registry/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import { TEST_CLUSTER_TOKEN } from '../helpers/cluster.js';

const bin = new URL('../../bin/rootbox', import.meta.url).pathname;
let pg: TestPostgres;
let d: TestDaemon | undefined;

const cli = (args: string[], url = pg.url) => run(bin, args, { env: { ...process.env, ROOTBOX_REGISTRY: url, ROOTBOX_DATA_DIR: pg.dir + '/cli' } });
/** A host's settings; its cluster token is the one `cluster init` wrote to its token file. */
const cluster = (name: string, token: Record<string, string> = { tokenFile: `${pg.dir}/cli/cluster-token` }) => ({
  cluster: { registry: pg.url, host: name, advertise: '127.0.0.1:17946', listen: '127.0.0.1:0', lease: '2s', ...token },
});

test.before(async () => {
  pg = await startPostgres();
});
test.after(async () => {
  await d?.stop();
  await pg?.stop();
});

test('a daemon refuses to start on a registry nobody initialised, naming the command that fixes it', async () => {
  const err = await startTestDaemon(cluster('early', { token: TEST_CLUSTER_TOKEN })).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(isAppError(err), String(err));
  assert.is((err as { code: string }).code, 'registry_not_initialized');
  assert.match((err as Error).message, /rootbox cluster init/);
  const doctor = await cli(['doctor']);
  assert.match(doctor.stdout, /MISSING\s+cluster registry\s+postgres:\/\/rootbox:\*\*\*@[^ ]+: schema none, this rootbox needs \d+\s+rootbox cluster init/);
  assert.not.ok(doctor.stdout.includes(pg.password));
});

test('cluster init prepares the registry once; a daemon registers and cluster status shows it up, then down when it stops', async () => {
  const init = await cli(['cluster', 'init']);
  assert.is(init.code, 0, init.stderr);
  assert.match(init.stdout, `applied schema ${MIGRATIONS.map((m) => m.version).join(', ')}`);
  // the numbers no change has are named, with why, so nobody looks for them (9 and 10 today)
  const unused = Array.from({ length: KNOWN_VERSION }, (_, i) => i + 1).filter((v) => !MIGRATIONS.some((m) => m.version === v));
  assert.ok(unused.length > 0);
  const said = `schema ${unused.length === 1 ? `${unused[0]} is` : `${unused.slice(0, -1).join(', ')} and ${unused.at(-1)} are`} unused`;
  assert.ok(init.stdout.includes(said) && init.stdout.includes('none is missing'), init.stdout);
  const again = (await cli(['cluster', 'init'])).stdout;
  assert.match(again, /current/);
  assert.ok(again.includes(said), again);
  assert.equal(JSON.parse((await cli(['cluster', 'init', '--json'])).stdout).unused, unused);
  assert.match((await cli(['doctor'])).stdout, new RegExp(`ok\\s+cluster registry\\s+postgres://rootbox:\\*\\*\\*@[^ ]+: schema ${KNOWN_VERSION}\\s`));

  d = await startTestDaemon(cluster('host-a'));
  const status = await cli(['cluster', 'status', '--json']);
  assert.is(status.code, 0, status.stderr);
  const doc = JSON.parse(status.stdout) as { schema: number; hosts: { name: string; up: boolean; advertise: string; capacity: Record<string, number> }[] };
  assert.is(doc.schema, KNOWN_VERSION);
  const a = doc.hosts.find((h) => h.name === 'host-a');
  assert.ok(a?.up);
  assert.is(a!.advertise, '127.0.0.1:17946');
  assert.ok(a!.capacity.memoryFreeBytes > 0 && a!.capacity.diskFreeBytes > 0);
  const table = await cli(['cluster', 'status']);
  assert.match(table.stdout, /host-a\s+up\s+\d/);
  assert.not.ok(table.stdout.includes(pg.password));

  const logs = d.logs;
  await d.stop();
  d = undefined;
  const after = JSON.parse((await cli(['cluster', 'status', '--json'])).stdout) as typeof doc;
  assert.is(after.hosts.find((h) => h.name === 'host-a')!.up, false);
  const token = readFileSync(`${pg.dir}/cli/cluster-token`, 'utf8').trim();
  assert.match(init.stdout, token, 'init printed the token it made');
  for (const l of logs) assert.not.ok(JSON.stringify(l).includes(pg.password) || JSON.stringify(l).includes(token), JSON.stringify(l));
});

test('config show and a refused cluster command never print the registry password', async () => {
  const shown = await cli(['config', 'show']);
  assert.is(shown.code, 0, shown.stderr);
  assert.not.ok(shown.stdout.includes(pg.password));
  assert.match(shown.stdout, /postgres:\/\/rootbox:\*\*\*@127\.0\.0\.1/);
  const withToken = await run(bin, ['config', 'show'], { env: { ...process.env, ROOTBOX_REGISTRY: pg.url, ROOTBOX_CLUSTER_TOKEN: TEST_CLUSTER_TOKEN } });
  assert.is(withToken.code, 0, withToken.stderr);
  assert.not.ok(withToken.stdout.includes(TEST_CLUSTER_TOKEN), 'config show prints the cluster token');
  const wrong = pg.url.replace(pg.password, 'not-the-password');
  const refused = await cli(['cluster', 'status'], wrong);
  assert.is(refused.code, 1);
  assert.not.ok((refused.stdout + refused.stderr).includes('not-the-password'));
});

test.run();
