// What a server keeps when its host dies and it is recovered elsewhere (issue 38 items 1 and 3):
// three hosts on a real PostgreSQL registry with their checkpoints in a real S3 store (Ceph RGW),
// cluster.recoverAfter 5 s; host-a and host-b run in this process (idleTimeout 3 s: a server
// that may sleep does), host-c is the real daemon as a child process, killed with SIGKILL. On
// host-c a verified account (its phone's code read from the log SMS provider) makes a
// never_sleep server with an app under run.sh, which is checkpointed (by hand: it never
// sleeps); only then does it expose its app's TCP port and get its own domain (active in the
// registry, as an order leaves it) — settings changed after its newest checkpoint. host-c is
// killed, its containers with it, its data dir taken away. After recoverAfter the server runs on
// another host: its domain serves its page through both edges, it does not sleep (running past
// the idle timeout, never_sleep in the API), its exposed port answers at the new address
// GET /servers/:id shows, an SSH login with its key checks the host key recorded before, and the
// account's api key works. Then a plain move to the other host keeps all of it again.

import { randomBytes } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { adminCli } from '../helpers/admincli.js';
import type { TestDaemon } from '../helpers/daemon.js';
import type { TestPostgres } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';
import { until } from '../helpers/wait.js';
import type { ProcDaemon } from '../hosting/helpers/procdaemon.js';
import { get } from '../registry/fixtures/clients.js';
import { startS3Cluster, type S3Cluster } from '../registry/fixtures/s3cluster.js';
import { api } from '../registry/fixtures/twohosts.js';

const RECOVER_AFTER = '5s';
const IDLE_MS = 3000;
const RUN_SH = '#!/bin/bash\ncd /root/www && exec python3 -m http.server 80\n';

let cl: S3Cluster;
let pg: TestPostgres;
let a: TestDaemon;
let b: TestDaemon;
let c: ProcDaemon;
const page = randomBytes(3000);
let srv: { id: string; slug: string; key: string; sha: string };
let domain = '';
let keyFile = '';
let knownHosts = '';
const work = mkdtempSync(join(tmpdir(), 'rbx-recset-'));

const env = (d: TestDaemon) => ({ ...process.env, ROOTBOX_DATA_DIR: d.dataDir, ROOTBOX_REGISTRY: pg.url });
const placement = async () => (await pg.sql(`SELECT host FROM placements WHERE server_id = '${srv.id}'`)).trim();
const exec = async (via: { http: number }, command: string) => {
  const r = await api(via, 'POST', `/servers/${srv.id}/exec`, { key: srv.key, body: { command, timeout: 120 } });
  assert.is(r.status, 200, `${command}: ${r.text}`);
  assert.is(r.json.exit_code, 0, `${command}: ${r.json.stderr}`);
  return String(r.json.stdout);
};
/** SSH through host-a's SSH port with the server's key; `check` yes: the host key must be the one recorded. */
const ssh = (command: string, check: 'accept-new' | 'yes' = 'yes') =>
  run(
    'ssh',
    [
      ...['-p', String(a.daemon.ssh.port), '-i', keyFile, '-o', `StrictHostKeyChecking=${check}`, '-o', `UserKnownHostsFile=${knownHosts}`],
      ...['-o', 'IdentitiesOnly=yes', '-o', 'BatchMode=yes', '-F', '/dev/null', 'root@127.0.0.1', command],
    ],
    { timeoutMs: 60_000 },
  );

/** Everything the server must have kept, checked on `holder` (the host the registry places it on):
 *  each part checked on its own, and every part that failed named at the end. */
async function keptAll(holder: TestDaemon, tag: string): Promise<void> {
  const host = holder.cfg.cluster.host!;
  assert.is(await placement(), host);
  const failed: string[] = [];
  const part = async (what: string, check: () => Promise<void>) => {
    try {
      await check();
    } catch (e) {
      failed.push(`${what}: ${(e as Error).message}`);
    }
  };
  await part('its slug and its own domain through both edges', async () => {
    for (const via of [a, b]) {
      for (const name of [`${srv.slug}.localhost`, domain]) {
        const g = await get(via, name, '/index.html');
        assert.is(g.status, 200, `${name} through ${via.cfg.cluster.host}: ${g.status} ${g.body.subarray(0, 200).toString()}`);
        assert.ok(g.body.equals(page), `${name}'s page byte for byte through ${via.cfg.cluster.host}`);
      }
    }
    assert.is(holder.daemon.hosting.core.domains.slugOf(domain), srv.slug, `${host} routes the domain to the server`);
  });
  await part('the account’s api key and never_sleep in the API', async () => {
    for (const via of [a, b]) {
      const v = await api(via, 'GET', `/servers/${srv.id}`, { key: srv.key });
      assert.is(v.status, 200, `its api key through ${via.cfg.cluster.host}: ${v.text}`);
      assert.is(v.json.never_sleep, true, `never_sleep: ${v.text}`);
    }
  });
  await part('the exposed port at the new address the API shows', async () => {
    for (const via of [a, b]) {
      const v = await api(via, 'GET', `/servers/${srv.id}`, { key: srv.key });
      const ports = v.json.exposed_ports as { public: string; container_port: number }[];
      assert.is(ports?.length, 1, `exposed ports ${JSON.stringify(ports)}`);
      assert.is(ports[0].container_port, 80);
      const port = Number(ports[0].public.split(':').pop());
      assert.ok(
        holder.daemon.store.exposures.byServer(srv.id).some((e) => e.port === port),
        `${ports[0].public} is a port of ${host}`,
      );
      const direct = Buffer.from(await (await fetch(`http://127.0.0.1:${port}/index.html`)).arrayBuffer());
      assert.ok(direct.equals(page), 'the exposed port reaches the app');
    }
  });
  await part('its file, and an SSH login with its key and the host key recorded before', async () => {
    assert.is((await exec(a, 'sha256sum /root/data | cut -d" " -f1')).trim(), srv.sha, 'its file');
    const login = await ssh('hostname; sha256sum /root/data | cut -d" " -f1');
    assert.is(login.code, 0, `ssh login with the recorded host key: ${login.stderr}`);
    assert.is(login.stdout, `${srv.slug}\n${srv.sha}\n`);
  });
  await part('never_sleep: running, and still running past the idle timeout', async () => {
    await until(`running on ${host}`, () => holder.daemon.runtime.get(srv.id)?.state === 'running', 30_000, 50);
    await new Promise((r) => setTimeout(r, IDLE_MS * 2));
    assert.is(holder.daemon.runtime.get(srv.id)?.state, 'running', `it did not sleep on ${host}`);
  });
  assert.equal(failed, [], `${tag}: not kept:\n${failed.join('\n')}`);
}

test.before(async () => {
  try {
    await setUp();
  } catch (e) {
    console.error('set-up failed:', e);
    for (const l of c?.logs ?? []) if (l.level === 'warn' || l.level === 'error') console.error('host-c:', JSON.stringify(l).slice(0, 600));
    throw e;
  }
});

async function setUp(): Promise<void> {
  const inProcess = { proxy: { idleTimeout: IDLE_MS, idleCheckInterval: '200ms', wakeTimeout: '30s' } };
  cl = await startS3Cluster(
    [
      { name: 'host-a', settings: inProcess },
      { name: 'host-b', settings: inProcess },
      { name: 'host-c', child: true, settings: { proxy: { idleTimeout: 600_000 } } },
    ],
    { cluster: { recoverAfter: RECOVER_AFTER } },
  );
  ({ pg } = cl);
  a = cl.daemon('host-a');
  b = cl.daemon('host-b');
  c = cl.child('host-c');
  // a verified account (never_sleep needs a phone): the code from host-c's log SMS provider
  const phone = `+1555${String(Date.now()).slice(-7)}`;
  const ask = await api(c, 'POST', '/create', { body: { phone } });
  assert.is(ask.status, 200, ask.text);
  const code = await until(
    'the code in host-c’s log',
    () => {
      const l = c.logs.find((x) => x.to === phone && typeof x.text === 'string');
      return l && /(\d{6})/.exec(l.text as string)?.[1];
    },
    20_000,
    100,
  );
  const slug = `rs${randomBytes(3).toString('hex')}`;
  const r = await api(c, 'POST', '/create', { body: { phone, code, never_sleep: true, subdomains: [slug] } });
  assert.is(r.status, 200, r.text);
  assert.is(r.json.never_sleep, true, r.text);
  srv = { id: r.json.id, slug, key: r.json.api_key, sha: '' };
  assert.is(await placement(), 'host-c', 'made on host-c');
  keyFile = join(work, 'key');
  knownHosts = join(work, 'known_hosts');
  writeFileSync(keyFile, r.json.ssh_private_key, { mode: 0o600 });
  const b64 = page.toString('base64');
  await exec(
    c,
    `mkdir -p /root/www && echo ${b64} | base64 -d > /root/www/index.html && printf '${RUN_SH.replace(/\n/g, '\\n')}' > /root/run.sh && chmod +x /root/run.sh && head -c 4000000 /dev/urandom > /root/data && sync`,
  );
  srv.sha = (await exec(c, 'sha256sum /root/data | cut -d" " -f1')).trim();
  await until(
    'the app answers through host-a',
    async () => ((await get(a, `${slug}.localhost`, '/index.html')).body.equals(page) ? true : undefined),
    30_000,
    100,
  );
  // it never sleeps, so it is checkpointed by hand
  const cp = await api(c, 'POST', `/servers/${srv.id}/checkpoints`, { key: srv.key, body: { comment: 'before the settings' } });
  assert.is(cp.status, 201, cp.text);
  // after its newest checkpoint: a port exposed and its own domain (active, as its order leaves it in the registry)
  const exp = await api(c, 'POST', '/expose', { key: srv.key, body: { server: srv.id, port: 80 } });
  assert.is(exp.status, 200, exp.text);
  // the answer does not wait for the registry (registry/settingswriter.ts): its row follows it
  await until(
    'the exposed port in the registry',
    async () => ((await pg.sql(`SELECT exposed::text FROM server_settings WHERE server_id = '${srv.id}'`)).trim() === '{80}' ? true : undefined),
    10_000,
    50,
  );
  domain = `www.${slug}.example`;
  const accountId = String(r.json.account_id ?? (await pg.sql(`SELECT account_id FROM placements WHERE server_id = '${srv.id}'`)).trim());
  await pg.sql(`INSERT INTO custom_domains (domain, server_id, account_id, host, state) VALUES ('${domain}', '${srv.id}', '${accountId}', 'host-c', 'active')`);
  // the first login through host-a records its host key (relayed to host-c)
  const first = await ssh('hostname', 'accept-new');
  assert.is(first.code, 0, first.stderr);
  assert.is(first.stdout, `${slug}\n`);
}

test.after(async () => {
  try {
    await cl?.stop();
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test('host-c killed with SIGKILL and its data dir gone: the recovered server keeps its domain, never_sleep, exposed port, keys and host key', async () => {
  const gone = `${c.dataDir}.gone`;
  await c.kill();
  const runcRoot = join(c.dataDir, 'runc');
  const list = await run('runc', ['--root', runcRoot, 'list', '-q']);
  for (const id of list.stdout.split('\n').filter(Boolean)) await run('runc', ['--root', runcRoot, 'kill', '--all', id, 'KILL']);
  renameSync(c.dataDir, gone);
  try {
    await until('recovered', async () => ((await placement()) !== 'host-c' ? true : undefined), 90_000, 200);
    const holder = (await placement()) === 'host-a' ? a : b;
    await keptAll(holder, 'recovered');
  } finally {
    renameSync(gone, c.dataDir);
  }
});

test('then a plain move to the other host keeps all of it again', async () => {
  const from = (await placement()) === 'host-a' ? a : b;
  const to = from === a ? b : a;
  const m = await adminCli(['servers', 'move', srv.id, '--to', to.cfg.cluster.host!, '--json'], env(from));
  assert.is(m.code, 0, m.stderr + m.stdout);
  await keptAll(to, 'moved');
  assert.is(JSON.parse(m.stdout).move.was, 'running', 'it ran when the move began (never_sleep)');
});

test.run();
