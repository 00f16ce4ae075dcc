// The README's shell examples, run with bash as printed against real daemons, so a README that
// drifts from what rootbox does fails here.
//
// "Quick start" and "Reaching the APIs" (health checks, feedback, creating a server and logging in
// with its ssh line, MCP by hand, exec, files) run against a daemon with runc servers; the cluster
// guide's `bin/rootbox …` block ("Cluster mode") runs against a PostgreSQL of the test's own, its
// `bin/rootbox serve` a real daemon process. One bash runs a section's lines in order (the
// variables of one line are the next's); a `curl` function around the real one writes each
// answer's status to stderr, which the test reads: every line exits 0, every curl answers 2xx, and
// each answers what the comment beside it says.
//
// What differs from a reader's machine, and nothing else: the daemons' ports for 8443/8080, a temp
// dir as the working dir (holding the daemon's CA at var/tls/ca.pem, the app.py the files examples
// upload, and as HOME its ~/.ssh, whose config accepts a new host key instead of asking), the ssh
// line's host (the test daemon listens on 127.0.0.1); in the cluster guide, the registry URL's
// machines (db1: a closed port, as a dead primary; db2: the test's PostgreSQL) and password, and
// the config file a host has (ROOTBOX_CONFIG: its listeners and runtime names of its own). A line
// that cannot run as printed is listed in EXCLUDED with the reason, and `bin/rootbox serve` in
// BACKGROUND (it serves until stopped); an entry that matches no line fails, so nothing is left
// out silently.

import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { TEST_CLUSTER_TOKEN } from '../helpers/cluster.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { freePort } from '../helpers/ports.js';
import { startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { run } from '../helpers/run.js';

const repo = new URL('../../', import.meta.url).pathname;
const QUICK = '## Quick start'; // each section up to the next heading of its level or above, with its subsections
const SECTION = '## Reaching the APIs';
const CLUSTER = '### Cluster mode';

/** Lines deliberately not run, each with why (matched by substring, or whole; each must match a line). */
const EXCLUDED: { line: string; exact?: boolean; why: string }[] = [
  {
    line: 'bash scripts/setup && bin/rootbox serve',
    why: "sets up the host (packages, Node, the base image: CI's own setup step runs it) and starts a daemon with the embedded defaults, which the test starts itself on ports of its own (test/helpers/daemon.ts); the rest of the examples run against it",
  },
  { line: 'bash scripts/setup --test && npm test', why: 'the test suite itself' },
  {
    line: 'claude mcp add',
    why: 'configures the Claude Code client, which the test host does not have (the /mcp endpoint itself: the curl lines below, and test/mcp)',
  },
  {
    line: '/servers/$ID/domains',
    why: 'a custom domain needs an ACME directory and public DNS; with the embedded defaults it is 503 not_configured by design (test/domains covers it)',
  },
  {
    line: './registry-cluster.sh',
    why: "the guide's PostgreSQL steps (hba, primary, standby, sync, promote, follow) on machines p, s1, s2: test/registry/quorum.test.ts runs them in the guide's order through test/helpers/postgres.ts, with clusters on this host's ports for the machines",
  },
  {
    line: 'ROOTBOX_CLUSTER_ADVERTISE=10.0.0.11:7946',
    why: "a host's env file (/etc/rootbox/env): the cluster test gives its daemon the same settings with addresses of its own",
  },
  { line: "ROOTBOX_REGISTRY='postgres://rootbox:PASSWORD@p:5432", why: 'the same env file' },
  { line: 'ROOTBOX_HOST_NAME=host-a', exact: true, why: 'the same env file' },
  { line: 'ROOTBOX_CLUSTER_LISTEN=0.0.0.0:7946', why: 'the same env file' },
];

/** Lines run in the background (a daemon serves until stopped): the test waits until it has started. */
const BACKGROUND = ['bin/rootbox serve'];

interface Line {
  heading: string;
  cmd: string;
  comment: string; // the `# …` beside it and the `# → …` lines below it
}

/** The fenced sh blocks of the section whose heading starts with `section`, their lines
 *  (continuations joined: a trailing backslash or pipe) with their comments. */
function examples(readme: string, section: string): Line[][] {
  const level = section.indexOf(' ');
  const start = readme.indexOf(`\n${section}`);
  assert.ok(start >= 0, `README has no "${section}" section`);
  // up to the next heading of the same level or above (outside the code blocks, whose comments start with #)
  const all = readme.slice(start + 1).split('\n');
  let fenced = false;
  const upTo = all.findIndex((l, i) => {
    if (l.trimStart().startsWith('```')) fenced = !fenced;
    return i > 0 && !fenced && new RegExp(`^#{1,${level}} `).test(l);
  });
  const text = `\n${(upTo < 0 ? all : all.slice(0, upTo)).join('\n')}`;
  const blocks: Line[][] = [];
  let heading = text.slice(1, text.indexOf('\n', 1));
  let block: Line[] | undefined;
  let pending = '';
  for (const line of text.split('\n')) {
    const raw = block ? line.replace(/^ {3}/, '') : line; // the guide's steps are indented under their list item
    if (!block && /^#{2,4} /.test(raw)) heading = raw;
    if (raw.trimStart().startsWith('```')) {
      if (block) (blocks.push(block), (block = undefined));
      else if (raw.trim() === '```sh') block = [];
      continue;
    }
    if (!block) continue;
    if (/^\s*#/.test(raw)) {
      if (block.length) block[block.length - 1].comment += ` ${raw.replace(/^\s*#\s*/, '')}`;
      continue;
    }
    const joined = pending + raw;
    if (joined.endsWith('\\')) {
      pending = `${joined.slice(0, -1)} `;
      continue;
    }
    if (/\|\s*$/.test(joined)) {
      pending = `${joined} `;
      continue;
    }
    pending = '';
    if (!joined.trim()) continue;
    const m = /^(.*?)\s{2,}#\s(.*)$/.exec(joined); // a comment after two spaces, outside the quotes of these lines
    block.push({ heading, cmd: (m ? m[1] : joined).trim(), comment: m ? m[2] : '' });
  }
  return blocks;
}

/** The lines of `blocks` to run, and which entries of EXCLUDED matched (each must match some section). */
function toRun(blocks: Line[][], used: Set<string>): Line[] {
  const run: Line[] = [];
  for (const l of blocks.flat()) {
    const skip = EXCLUDED.find((s) => (s.exact ? l.cmd === s.line : l.cmd.includes(s.line)));
    if (skip) used.add(skip.line);
    else run.push(l);
  }
  return run;
}

interface Ran {
  rc: number;
  stdout: string;
  stderr: string;
  statuses: number[];
}

/** A background line: started with its output in serve.log and its pid in serve.pid, then waited
 *  for until its admin socket listens (the last part of a daemon's start), two minutes at most. */
const background = (l: string) =>
  `${l} > serve.log 2>&1 & echo $! > serve.pid; for __i in $(seq 1200); do grep -q 'admin channel listening' serve.log && break; kill -0 "$(cat serve.pid)" 2>/dev/null || break; sleep 0.1; done; grep -q 'admin channel listening' serve.log`;

/** Runs the lines in one bash, in `cwd`, each (as `edit` makes it) followed by markers on both streams. */
async function runBlock(lines: string[], cwd: string, edit: (line: string) => string, env: Record<string, string> = {}): Promise<Ran[]> {
  const script = [
    // the status of every answer, on stderr (the lines' own output stays as printed)
    `curl() { command curl -w '%{stderr}\\n@@HTTP %{http_code}\\n' "$@"; }`,
    ...lines.flatMap((l, i) => [
      BACKGROUND.includes(l) ? background(edit(l)) : edit(l),
      `__rc=$?; printf '\\n@@END ${i} %d\\n' "$__rc"; printf '\\n@@END ${i}\\n' >&2`,
    ]),
  ].join('\n');
  // asynchronously: the daemon answering these may run in this very process
  const r = await bash(script, cwd, env);
  const out = r.stdout.split(/\n@@END \d+ (\d+)\n/);
  const err = r.stderr.split(/\n@@END \d+\n/);
  return lines.map((_, i) => {
    const stderr = err[i] ?? '';
    return {
      rc: out[2 * i + 1] === undefined ? -1 : Number(out[2 * i + 1]),
      stdout: out[2 * i] ?? '',
      stderr,
      statuses: [...stderr.matchAll(/@@HTTP (\d+)/g)].map((m) => Number(m[1])),
    };
  });
}

/** bash -c script in cwd (HOME there too: no ~/.curlrc, its own ~/.ssh), its output; killed after 3 minutes. */
function bash(script: string, cwd: string, env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn('bash', ['-c', script], { cwd, env: { PATH: process.env.PATH, HOME: cwd, ...env }, timeout: 180_000 });
    let stdout = '';
    let stderr = '';
    p.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    p.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const APP = 'print("hello from the README")\n';

/** What the comment beside a line says, checked against what it answered (beyond exit 0 and 2xx). */
function answersAsSaid(l: Line, r: Ran, cwd: string): void {
  const what = `${l.cmd}\n→ ${r.stdout.slice(0, 600)}\n${r.stderr.slice(0, 600)}`;
  const c = l.cmd;
  if (c.includes('/healthz')) assert.ok(r.stdout.length > 0, what);
  if (c.includes('/create')) {
    const s = JSON.parse(readFileSync(join(cwd, 'server.json'), 'utf8'));
    // the comment's fields
    for (const k of ['id', 'subdomain', 'state', 'ssh', 'ssh_private_key', 'api_key', 'credits', 'usage']) assert.ok(k in s, `${k} missing: ${what}`);
    assert.match(s.id, /^srv_/);
    assert.is(s.subdomain, 'my-app.localhost');
    assert.is(s.state, 'running');
    assert.is(s.credits.tier, 'anonymous');
    assert.match(s.ssh, /^ssh -i ~\/\.ssh\/srv_\w+ root@\S+ -p \d+$/);
    assert.match(s.ssh_private_key, /^-----BEGIN OPENSSH PRIVATE KEY-----/);
    assert.match(s.api_key, /^rbx_/);
  }
  if (c.startsWith('mkdir -p ~/.ssh')) {
    const id = JSON.parse(readFileSync(join(cwd, 'server.json'), 'utf8')).id;
    assert.match(readFileSync(join(cwd, '.ssh', id), 'utf8'), /^-----BEGIN OPENSSH PRIVATE KEY-----/, what);
  }
  if (c.includes('"$(jq -r .ssh server.json)"')) assert.match(r.stdout, /^\S+\n$/, what); // the server's hostname
  if (c.includes('"method":"tools/list"')) {
    const names = (JSON.parse(r.stdout).result.tools as { name: string }[]).map((t) => t.name);
    assert.ok(names[0] === 'create_server' && names.includes('exec') && names.includes('write_file'), what);
  }
  if (c.includes('method:"tools/call"')) {
    const a = JSON.parse(JSON.parse(r.stdout).result.content[0].text);
    assert.is(a.exit_code, 0, what);
    assert.match(a.stdout, /^Linux /, what);
  }
  if (c.includes('/exec') && c.includes('uname -a')) {
    const a = JSON.parse(r.stdout);
    for (const k of ['exit_code', 'signal', 'stdout', 'stderr', 'truncated', 'timed_out', 'ms']) assert.ok(k in a, `${k} missing: ${what}`);
    assert.is(a.exit_code, 0, what);
    assert.match(a.stdout, /^Linux /);
  }
  if (c.includes('/exec') && c.includes('"ls","-l"')) {
    const a = JSON.parse(r.stdout);
    assert.is(a.exit_code, 0, what);
    assert.match(a.stdout, / passwd\n/, what);
  }
  if (c.includes('application/x-ndjson')) {
    const said = /(\{"stream".*?\})…/.exec(l.comment);
    assert.ok(said, `no first line in the comment: ${l.comment}`);
    const got = r.stdout
      .trim()
      .split('\n')
      .map((x) => JSON.parse(x));
    assert.equal(got[0], JSON.parse(said[1]), what);
    assert.is(
      got
        .filter((x) => x.stream === 'stdout')
        .map((x) => x.data)
        .join(''),
      '1\n2\n3\n',
      what,
    );
    assert.is(got.at(-1).exit_code, 0, what);
  }
  if (c.includes('-T app.py')) assert.equal(JSON.parse(r.stdout), { path: '/root/app/app.py', size: APP.length }, what);
  if (c.includes('/files?path=/root/app/app.py"')) assert.is(r.stdout, APP, what);
  if (c.includes('list=1')) {
    const a = JSON.parse(r.stdout);
    const e = a.entries.find((x: { name: string }) => x.name === 'app.py');
    assert.ok(e, what);
    assert.is(e.type, 'file');
    assert.is(e.mode, '755');
    assert.is(e.size, APP.length);
  }
  if (c.includes('> app.tgz')) {
    const tgz = readFileSync(join(cwd, 'app.tgz'));
    assert.is(tgz.subarray(0, 2).toString('hex'), '1f8b', 'app.tgz is gzip');
    const t = spawnSync('tar', ['tzf', 'app.tgz'], { cwd, encoding: 'utf8' });
    assert.match(t.stdout, /app\.py/, what);
  }
}

let d: TestDaemon;
let pg: TestPostgres | undefined;
const work = mkdtempSync(join(tmpdir(), 'rbx-readme-'));
const host = mkdtempSync(join(tmpdir(), 'rbx-readme-host-')); // the cluster guide's working dir
const readme = () => readFileSync(join(repo, 'README.md'), 'utf8');

test.before(async () => {
  // the ssh line's host: where the test daemon's SSH listens
  d = await startTestDaemon({ public: { sshHost: '127.0.0.1' } });
  if (!d.containers) throw new Error('this file needs the runc runtime');
  mkdirSync(join(work, 'var', 'tls'), { recursive: true });
  writeFileSync(join(work, 'var', 'tls', 'ca.pem'), d.ca);
  writeFileSync(join(work, 'app.py'), APP);
  // a new host key is accepted instead of asked about (there is no one to answer), and kept in the
  // test's HOME: ssh reads its config from the passwd entry's home, so `ssh` on the bash's PATH is
  // the real one with those two options
  mkdirSync(join(work, '.ssh'), { mode: 0o700 });
  mkdirSync(join(work, '.bin'));
  writeFileSync(
    join(work, '.bin', 'ssh'),
    `#!/bin/sh\nexec ${sshPath()} -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile="$HOME/.ssh/known_hosts" "$@"\n`,
    { mode: 0o755 },
  );
});
test.after(async () => {
  await d?.stop();
  await stopServe();
  await pg?.stop();
  rmSync(work, { recursive: true, force: true });
  rmSync(host, { recursive: true, force: true });
});

test('every exclusion names a line the README has, and says why', () => {
  const used = new Set<string>();
  for (const section of [QUICK, SECTION, CLUSTER]) toRun(examples(readme(), section), used);
  for (const s of EXCLUDED) {
    assert.ok(used.has(s.line), `EXCLUDED names "${s.line}", which the README no longer has`);
    assert.ok(s.why.length > 10);
  }
});

test("the README's quick start, API, create, ssh, MCP, exec and files examples run as printed and answer what their comments say", async () => {
  const used = new Set<string>();
  const lines = [...toRun(examples(readme(), QUICK), used), ...toRun(examples(readme(), SECTION), used)];
  // the sections the examples come from are all there (a renamed one would run nothing of its own)
  const headings = new Set(lines.map((l) => l.heading));
  for (const h of [SECTION, '### Creating a server', '### rootbox as an MCP server (for agents)', '### Commands and files over HTTPS'])
    assert.ok(headings.has(h), `no example run from ${h}`);
  assert.ok(lines.length >= 22, `${lines.length} lines to run`);

  // one bash for all of them, in README order: the create block's $KEY and $ID are the exec block's
  const ran = await runBlock(
    lines.map((l) => l.cmd),
    work,
    (l) => l.replaceAll(':8443', `:${d.https}`).replaceAll(':8080', `:${d.http}`),
    { PATH: `${join(work, '.bin')}:${process.env.PATH}` },
  );
  lines.forEach((l, i) => checkLine(l, ran[i]));
  // the last example deleted the directory
  const gone = await bash(
    `curl -s -o /dev/null -w '%{http_code}' --cacert var/tls/ca.pem -H "Authorization: Bearer $(jq -r .api_key server.json)" "https://api.localhost:${d.https}/servers/$(jq -r .id server.json)/files?path=/root/app"`,
    work,
  );
  assert.is(gone.stdout, '404');
});

test("the cluster guide's bin/rootbox commands run as printed against a registry whose first host is down", async () => {
  const lines = toRun(examples(readme(), CLUSTER), new Set());
  for (const l of lines) assert.ok(/^(export ROOTBOX_REGISTRY=|bin\/rootbox )/.test(l.cmd), `a line neither run nor excluded: ${l.cmd}`);
  for (const c of ['cluster init', 'serve', 'cluster status', 'servers list --cluster', 'status', 'doctor'])
    assert.ok(
      lines.some((l) => l.cmd.startsWith(`bin/rootbox ${c}`)),
      `no bin/rootbox ${c} in the guide`,
    );
  pg = await startPostgres();
  await pg.sql('CREATE DATABASE rootbox');
  const dead = await freePort(); // db1: nothing listens (a primary that died)
  chmodSync(host, 0o755); // the servers' mapped uids traverse the data dir's parents (serve refuses a 0700 one)
  symlinkSync(join(repo, 'bin'), join(host, 'bin'));
  writeFileSync(join(host, 'config.json'), JSON.stringify(hostConfig(await freePort())));
  const ran = await runBlock(
    lines.map((l) => l.cmd),
    host,
    (l) => l.replace('PASSWORD', pg!.password).replace('db1:5432', `127.0.0.1:${dead}`).replace('db2:5432', `127.0.0.1:${pg!.port}`),
    { ROOTBOX_CONFIG: join(host, 'config.json') },
  );
  lines.forEach((l, i) => checkLine(l, ran[i], host));
});

/** The real ssh client's path. */
function sshPath(): string {
  const r = spawnSync('sh', ['-c', 'command -v ssh'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error('no ssh client on this host');
  return r.stdout.trim();
}

/** Exit 0, 2xx for every curl, and what the comment says. */
function checkLine(l: Line, r: Ran, cwd = work): void {
  const log =
    BACKGROUND.includes(l.cmd) && existsSync(join(cwd, 'serve.log')) ? `\nserve.log: ${readFileSync(join(cwd, 'serve.log'), 'utf8').slice(-3000)}` : '';
  const what = `${l.heading}: ${l.cmd}\nstdout: ${r.stdout.slice(0, 1500)}\nstderr: ${r.stderr.slice(0, 1500)}${log}`;
  assert.is(r.rc, 0, `exit ${r.rc}: ${what}`);
  if (/\bcurl\b/.test(l.cmd)) {
    assert.ok(r.statuses.length > 0, `no answer: ${what}`);
    for (const s of r.statuses) assert.ok(s >= 200 && s < 300, `status ${s}: ${what}`);
  }
  if (cwd === work) answersAsSaid(l, r, work);
  else clusterAsSaid(l, r, cwd);
}

/** The config file of the guide's host (its /etc/rootbox/config.json): listeners on loopback ports
 *  of its own, runtime names no other daemon of the tests has, its whereabouts in the temp dir. */
function hostConfig(channel: number): Record<string, unknown> {
  const n = 100 + (process.pid % 150);
  return {
    http: { host: '127.0.0.1', port: 0 },
    https: { host: '127.0.0.1', port: 0 },
    ssh: { host: '127.0.0.1', port: 0 },
    metrics: { listen: '127.0.0.1:0' },
    runDir: join(host, 'run'),
    shutdownTimeout: '2s',
    hosting: { portPool: `${29000 + (process.pid % 10) * 100}-${29000 + (process.pid % 10) * 100 + 99}` },
    runtime: {
      imageDir: process.env.ROOTBOX_IMAGE_DIR ?? join(repo, 'var', 'images'),
      bridge: `rbg${n}`,
      subnet: `10.196.${n}.0/24`,
      nftTable: `rbg${n}`,
      uidStart: 3_100_000_000 + (n - 100) * 65536 * 64,
      uidRanges: 64,
    },
    cluster: { listen: `127.0.0.1:${channel}`, advertise: `127.0.0.1:${channel}`, connectTimeout: '1s', lease: '3s' },
  };
}

/** The guide's comments: init applied the schema and wrote the token file; the daemon joined;
 *  status shows host-a up; doctor checked the registry. */
function clusterAsSaid(l: Line, r: Ran, cwd: string): void {
  const what = `${l.cmd}\n→ ${r.stdout.slice(0, 1500)}\n${r.stderr.slice(0, 600)}`;
  const c = l.cmd;
  if (c.startsWith('bin/rootbox cluster init')) {
    assert.match(r.stdout, /applied schema/, what);
    const token = readFileSync(join(cwd, 'var', 'cluster-token'), 'utf8').trim();
    assert.ok(r.stdout.includes(token) && token !== TEST_CLUSTER_TOKEN, what);
  }
  if (c.startsWith('bin/rootbox serve')) {
    const log = readFileSync(join(cwd, 'serve.log'), 'utf8');
    assert.match(log, /"msg":"joined the cluster","registry":"reachable"/, log.slice(-3000));
  }
  if (c.startsWith('bin/rootbox cluster status')) assert.match(r.stdout, /host-a\s+up\s/, what);
  if (c.startsWith('bin/rootbox servers list --cluster')) assert.ok(r.stdout.length > 0, what);
  if (c.startsWith('bin/rootbox status')) assert.match(r.stdout, /host-a/, what);
  if (c.startsWith('bin/rootbox doctor')) assert.match(r.stdout, /ok\s+cluster registry\s+postgres:\/\/rootbox:\*\*\*@/, what);
}

/** Stops the guide's daemon (SIGTERM, as systemd does) and removes what its runtime made on the host. */
async function stopServe(): Promise<void> {
  const pidFile = join(host, 'serve.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8'));
  try {
    process.kill(pid, 'SIGTERM');
    for (let i = 0; i < 200; i++) {
      process.kill(pid, 0);
      await new Promise((r) => setTimeout(r, 100));
    }
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone
  }
  const cfg = hostConfig(0).runtime as { bridge: string; nftTable: string };
  for (const args of [
    ['nft', 'delete', 'table', 'inet', cfg.nftTable],
    ['nft', 'delete', 'table', 'bridge', cfg.nftTable],
    ['ip', 'link', 'del', cfg.bridge],
  ])
    await run(args[0], args.slice(1)).catch(() => {});
}

test.run();
