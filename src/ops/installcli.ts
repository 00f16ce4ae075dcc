// `rootbox install` and `rootbox uninstall` flags (install.ts does the work).

import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { AppError } from '../errors.js';
import { install, uninstall } from './install.js';

const USAGE = `usage: rootbox install [--domain D] [--public-ip IP] [--tls-cert FILE --tls-key FILE]
                       [--http-port 80] [--https-port 443] [--ssh-port 22]
                       [--prefix /opt/rootbox] [--etc /etc/rootbox] [--data-dir /var/lib/rootbox]
                       [--unit-dir /etc/systemd/system] [--no-enable]
       rootbox uninstall [--purge] [--prefix …] [--etc …] [--data-dir …] [--unit-dir …]
install (as root, from the checkout after 'bash scripts/setup'): copies dist/, bin/, package.json,
the unit and the native addons' node_modules to the prefix (never var/), writes <etc>/config.json
from the flags (other keys of an existing one are kept; ports: a flag, else the config's, else
80/443/22 when nothing listens there, else 8080/8443/2222 with a note; plain HTTP redirects to HTTPS), puts the base image in <data-dir>/images
(linked from the checkout's var/images when built there, else built), writes rootbox.service and
enables it when systemd runs. Safe to run again. uninstall removes the unit and the prefix; the
data dir and <etc> only with --purge.`;

function portFlag(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < 1 || n > 65535) throw AppError.of('install_failed', `--${name} takes a TCP port from 1 to 65535, not '${v}'`);
  return n;
}

export async function installCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      prefix: { type: 'string', default: '/opt/rootbox' },
      etc: { type: 'string', default: '/etc/rootbox' },
      'data-dir': { type: 'string', default: '/var/lib/rootbox' },
      'unit-dir': { type: 'string', default: '/etc/systemd/system' },
      domain: { type: 'string' },
      'public-ip': { type: 'string' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      'http-port': { type: 'string' },
      'https-port': { type: 'string' },
      'ssh-port': { type: 'string' },
      'no-enable': { type: 'boolean' },
      purge: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
  });
  if (values.help || positionals.length !== 1) {
    process.stdout.write(USAGE + '\n');
    return values.help ? 0 : 2;
  }
  const o = {
    prefix: resolve(values.prefix),
    etc: resolve(values.etc),
    dataDir: resolve(values['data-dir']),
    unitDir: resolve(values['unit-dir']),
    domain: values.domain,
    publicIp: values['public-ip'],
    tlsCert: values['tls-cert'],
    tlsKey: values['tls-key'],
    ports: {
      http: portFlag('http-port', values['http-port']),
      https: portFlag('https-port', values['https-port']),
      ssh: portFlag('ssh-port', values['ssh-port']),
    },
    enable: !values['no-enable'],
    purge: values.purge,
  };
  const out = (t: string) => process.stdout.write(t + '\n');
  return positionals[0] === 'install' ? install(o, out) : uninstall(o, out);
}
