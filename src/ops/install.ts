// `rootbox install` / `rootbox uninstall`: puts what runs (the dist/ bundle with its C helpers,
// the node_modules of the external native addons, bin/, package.json, the unit, the C helpers'
// sources that name their binaries) under a prefix,
// writes the one config file that drives both the daemon and the image build, puts the base image
// where that config reads it (hardlinked from the checkout's var/images when already built there),
// installs the systemd unit and enables it when systemd runs. Never copies var/, .git or test/.
// The Node runtime: when the host's Node is older than the LTS rootbox needs, the one
// scripts/node-runtime put in <checkout>/node (fetching it now if setup has not) is copied to
// <prefix>/node, which the installed bin/rootbox, and so the unit, runs; the native addons are
// then loaded by that Node in the prefix, and a build for another Node is refused.
// The config gets the HTTP, HTTPS and SSH ports (ports.ts: 80, 443, 22 when free) and the redirect
// of plain HTTP to HTTPS. Running it twice is safe: files are replaced, the config keeps its other keys.

import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { loadConfig } from '../config/index.js';
import { AppError } from '../errors.js';
import { buildImage, findImage, imageOptions, imageTag, isBuilt, traverseAdvice, untraversable } from '../runtime/index.js';
import { ADDONS, addonProbeScript, NODE_LTS_MAJOR } from './noderuntime.js';
import { choosePorts, listeningPorts, type Listener } from './ports.js';

export interface InstallOptions {
  prefix: string;
  etc: string;
  dataDir: string;
  unitDir: string;
  domain?: string;
  publicIp?: string;
  tlsCert?: string;
  tlsKey?: string;
  /** --http-port, --https-port, --ssh-port (ports.ts chooses the others). */
  ports?: Partial<Record<Listener, number>>;
  enable: boolean;
  purge?: boolean;
}

/** Packages dist/rootbox.js loads from node_modules at run time (build.mjs `external`). */
const EXTERNAL = ['lmdb', 'node-pty', 'ssh2', 'cpu-features', 'msgpackr-extract'];

const checkout = (): string => resolve(dirname(process.argv[1] ?? '.'), '..');

/** The external packages and everything they depend on (optional ones when present). */
function runtimeModules(root: string): string[] {
  const seen = new Set<string>();
  const visit = (name: string) => {
    if (seen.has(name)) return;
    const pj = join(root, 'node_modules', name, 'package.json');
    if (!existsSync(pj)) return;
    seen.add(name);
    const p = JSON.parse(readFileSync(pj, 'utf8')) as Record<string, Record<string, string> | undefined>;
    for (const d of [...Object.keys(p.dependencies ?? {}), ...Object.keys(p.optionalDependencies ?? {})]) visit(d);
  };
  EXTERNAL.forEach(visit);
  return [...seen].sort();
}

const systemdRuns = (): boolean => existsSync('/run/systemd/system');

function systemctl(args: string[], out: (t: string) => void): void {
  const r = spawnSync('systemctl', args, { encoding: 'utf8' });
  if (r.status !== 0) throw AppError.of('install_failed', `systemctl ${args.join(' ')} failed: ${(r.stderr || r.error?.message || '').trim()}`);
  out(`systemctl ${args.join(' ')}`);
}

/** The shipped unit with the installed paths: ExecStart runs the installed bin with the installed config. */
export function unitText(source: string, o: Pick<InstallOptions, 'prefix' | 'etc'>): string {
  return source
    .split('\n')
    .filter((l) => !l.startsWith('Environment=ROOTBOX_DATA_DIR='))
    .map((l) => {
      if (l.startsWith('# rootbox as a systemd service')) return '# rootbox as a systemd service, written by `rootbox install` (run it again to update).';
      if (l.startsWith('WorkingDirectory=')) return `WorkingDirectory=${o.prefix}`;
      if (l.startsWith('ExecStart=')) return `ExecStart=${o.prefix}/bin/rootbox serve --config ${o.etc}/config.json`;
      if (l.startsWith('EnvironmentFile=')) return `EnvironmentFile=-${o.etc}/env`;
      if (l.startsWith('#')) return l.replaceAll('/opt/rootbox', o.prefix).replaceAll('/etc/rootbox', o.etc);
      return l;
    })
    .join('\n');
}

const read = (f: string) => (existsSync(f) ? readFileSync(f, 'utf8') : '');

/** <prefix>/node: the checkout's shipped Node (fetched first when the host's is too old and setup
 *  has not), or none when the host's Node is current; then the addons must load on it there. */
function placeNode(root: string, prefix: string, out: (t: string) => void): void {
  const [from, to] = [join(root, 'node'), join(prefix, 'node')];
  if (Number(process.versions.node.split('.')[0]) < NODE_LTS_MAJOR || existsSync(join(from, 'bin', 'node'))) {
    const r = spawnSync(join(root, 'scripts', 'node-runtime'), ['--if-older', from], { encoding: 'utf8' });
    if (r.status !== 0) throw AppError.of('install_failed', `installing Node ${NODE_LTS_MAJOR} failed: ${(r.stderr || r.error?.message || '').trim()}`);
  }
  if (!existsSync(join(from, 'bin', 'node'))) rmSync(to, { recursive: true, force: true });
  else if (read(join(from, '.integrity')) !== read(join(to, '.integrity')) || !existsSync(join(to, 'bin', 'node'))) {
    rmSync(to, { recursive: true, force: true });
    cpSync(from, to, { recursive: true });
  }
  const node = existsSync(join(to, 'bin', 'node')) ? join(to, 'bin', 'node') : process.execPath;
  const version = spawnSync(node, ['--version'], { encoding: 'utf8' }).stdout.trim();
  out(`Node ${version}: ${node === process.execPath ? `the host's ${node}` : node}`);
  const probe = spawnSync(node, ['-e', addonProbeScript()], { cwd: prefix, encoding: 'utf8' });
  let failed: string[] = [];
  try {
    failed = JSON.parse(probe.stdout) as string[];
  } catch {
    failed = [probe.stderr.trim() || `exit ${probe.status}`];
  }
  const fatal = failed.filter((f) => !ADDONS.some((a) => !a.required && f.startsWith(`${a.load}:`)));
  if (fatal.length)
    throw AppError.of(
      'install_failed',
      `native addons do not load on Node ${version} in ${prefix}: ${fatal.join('; ')}; run 'bash scripts/setup' in ${root} (it builds them for that Node), then install again`,
    );
  for (const f of failed) out(`warning: optional native addon does not load: ${f}`);
}

/** Puts the image the config reads in place: already there, linked from the checkout, or built. */
async function placeImage(configFile: string, root: string, out: (t: string) => void): Promise<void> {
  const cfg = loadConfig({ file: configFile, env: {} });
  const img = imageOptions(cfg);
  if (findImage(img)) return out(`image ${imageTag(img)} already in ${img.imageDir}`);
  const tag = imageTag(img);
  const cached = join(root, 'var', 'images');
  mkdirSync(img.imageDir, { recursive: true, mode: 0o755 });
  if (isBuilt(cached, tag) && resolve(cached) !== img.imageDir) {
    const tmp = join(img.imageDir, `.${tag}.install-${process.pid}`);
    rmSync(tmp, { recursive: true, force: true });
    let r = spawnSync('cp', ['-al', join(cached, tag), tmp], { encoding: 'utf8' });
    if (r.status !== 0) {
      rmSync(tmp, { recursive: true, force: true });
      r = spawnSync('cp', ['-a', join(cached, tag), tmp], { encoding: 'utf8' });
    }
    if (r.status === 0) {
      rmSync(join(img.imageDir, tag), { recursive: true, force: true });
      renameSync(tmp, join(img.imageDir, tag));
      return out(`image ${tag} taken from ${cached} into ${img.imageDir}`);
    }
    rmSync(tmp, { recursive: true, force: true });
    out(`copying the image from ${cached} failed (${r.stderr.trim()}); building it`);
  }
  await buildImage(img, out);
}

export async function install(o: InstallOptions, out: (t: string) => void): Promise<number> {
  const root = checkout();
  if (!existsSync(join(root, 'dist', 'rootbox.js'))) throw AppError.of('install_failed', `${root}/dist/rootbox.js is missing; run 'npm run build' first`);
  if (resolve(o.prefix) === root) throw AppError.of('install_failed', `the prefix ${o.prefix} is the checkout itself`);
  mkdirSync(o.prefix, { recursive: true, mode: 0o755 });
  for (const part of ['dist', 'bin', 'systemd']) {
    rmSync(join(o.prefix, part), { recursive: true, force: true });
    cpSync(join(root, part), join(o.prefix, part), { recursive: true, dereference: false, filter: (p) => !p.endsWith('.tmp') });
  }
  cpSync(join(root, 'package.json'), join(o.prefix, 'package.json'));
  // the C helpers' sources: native.ts finds dist/bin/<name>-<hash> by the hash of its source
  rmSync(join(o.prefix, 'src'), { recursive: true, force: true });
  cpSync(join(root, 'src', 'runtime', 'native'), join(o.prefix, 'src', 'runtime', 'native'), { recursive: true });
  const modules = runtimeModules(root);
  rmSync(join(o.prefix, 'node_modules'), { recursive: true, force: true });
  for (const m of modules) cpSync(join(root, 'node_modules', m), join(o.prefix, 'node_modules', m), { recursive: true });
  out(`program installed in ${o.prefix} (dist, bin, package.json, unit, src/runtime/native C sources, node_modules: ${modules.join(', ')})`);
  placeNode(root, o.prefix, out);

  // the config: the flags over what an earlier install wrote
  mkdirSync(o.etc, { recursive: true, mode: 0o755 });
  const file = join(o.etc, 'config.json');
  const old = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Record<string, Record<string, unknown>>) : {};
  const conf: Record<string, unknown> = { ...old, dataDir: o.dataDir, runtime: { imageDir: join(o.dataDir, 'images'), ...old.runtime } };
  if (o.domain) conf.domain = o.domain;
  if (o.publicIp) conf.publicIp = o.publicIp;
  if (o.tlsCert || o.tlsKey) {
    if (!o.tlsCert || !o.tlsKey) throw AppError.of('install_failed', '--tls-cert and --tls-key go together');
    conf.https = { ...old.https, cert: resolve(o.tlsCert), key: resolve(o.tlsKey) };
  }
  const port = (k: string) => old[k]?.port as number | undefined;
  const { ports, notes } = choosePorts(o.ports ?? {}, { http: port('http'), https: port('https'), ssh: port('ssh') }, listeningPorts());
  conf.http = { ...old.http, port: ports.http, redirect: old.http?.redirect ?? true }; // production: plain HTTP redirects to HTTPS
  conf.https = { ...(conf.https as object | undefined), port: ports.https };
  conf.ssh = { ...old.ssh, port: ports.ssh };
  notes.forEach(out);
  out(`ports: HTTP ${ports.http}, HTTPS ${ports.https}, SSH ${ports.ssh} (TCP, open them in the host's firewall; README "Running under systemd")`);
  writeFileSync(`${file}.tmp`, JSON.stringify(conf, null, 2) + '\n', { mode: 0o600 });
  loadConfig({ file: `${file}.tmp`, env: {} }); // refuses a bad value before it replaces the file
  renameSync(`${file}.tmp`, file);
  out(`config written to ${file}`);

  mkdirSync(o.dataDir, { recursive: true, mode: 0o755 });
  chmodSync(o.dataDir, 0o755);
  const bad = untraversable(o.dataDir, false);
  if (bad.length) throw AppError.of('data_dir_untraversable', traverseAdvice('data dir', o.dataDir, bad));
  await placeImage(file, root, out);

  mkdirSync(o.unitDir, { recursive: true });
  const unit = join(o.unitDir, 'rootbox.service');
  writeFileSync(unit, unitText(readFileSync(join(root, 'systemd', 'rootbox.service'), 'utf8'), o));
  out(`unit written to ${unit}`);
  if (o.enable && systemdRuns()) {
    systemctl(['daemon-reload'], out);
    systemctl(['enable', 'rootbox'], out);
    out('start it with: systemctl start rootbox');
  } else out(o.enable ? 'systemd is not running here: the unit is not enabled' : 'not enabled (--no-enable)');
  return 0;
}

export async function uninstall(o: InstallOptions, out: (t: string) => void): Promise<number> {
  const unit = join(o.unitDir, 'rootbox.service');
  if (systemdRuns() && existsSync(unit)) {
    spawnSync('systemctl', ['disable', '--now', 'rootbox'], { encoding: 'utf8' });
    out('systemctl disable --now rootbox');
  }
  rmSync(unit, { force: true });
  if (systemdRuns()) spawnSync('systemctl', ['daemon-reload']);
  if (resolve(o.prefix) === checkout()) throw AppError.of('install_failed', `the prefix ${o.prefix} is the checkout itself`);
  rmSync(o.prefix, { recursive: true, force: true });
  out(`removed ${unit} and ${o.prefix}`);
  if (o.purge) {
    rmSync(o.dataDir, { recursive: true, force: true });
    rmSync(o.etc, { recursive: true, force: true });
    out(`purged ${o.dataDir} and ${o.etc}`);
  } else out(`kept ${o.dataDir} and ${o.etc} (--purge removes them)`);
  return 0;
}
