// A real authoritative DNS server for tests: BIND 9 `named` in the foreground (-g) on port 53 of
// a loopback address of its own (127.53.x.y, picked free, added to lo as a /32 and removed on stop), with a scratch dir, one or more
// primary zones and a TSIG key (hmac-sha256) allowed to make RFC 2136 dynamic updates. Each zone
// gets SOA, NS ns1.<zone> and ns1.<zone> A <addr>, so "find the zone's NS, ask them directly"
// works against it. Records are added for tests with `nsupdate` (bind9-dnsutils). stop() ends
// the process by its PID and removes the dir.
//
//   const dns = await startNamed({ zones: ['example.test'] });
//   await dns.add('www.example.test', 'A', '127.0.0.1');
//   dns.server  // '127.53.7.9:53' (for pebble -dnsserver, resolvers)
//   dns.keySecret  // base64 TSIG secret (keyName dns.keyName, algorithm hmac-sha256)

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createSocket } from 'node:dgram';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from './run.js';

export interface NamedServer {
  /** The loopback address named listens on (port 53, UDP and TCP). */
  addr: string;
  port: number;
  /** `addr:port`, for pebble's -dnsserver and node's Resolver.setServers. */
  server: string;
  zones: string[];
  keyName: string;
  keyAlgorithm: 'hmac-sha256';
  /** The secret named accepts now. */
  keySecret: string;
  dir: string;
  pid: number;
  /** Adds one record with nsupdate (TSIG-signed). */
  add(name: string, type: string, value: string, ttl?: number): Promise<void>;
  /** Deletes every record of that name and type. */
  remove(name: string, type: string): Promise<void>;
  /** Raw nsupdate commands (without `server`/`send`), e.g. ['update add x.example.test 60 TXT "v"']. */
  nsupdate(lines: string[]): Promise<void>;
  /** Replaces the TSIG secret named accepts (config rewritten, SIGHUP); `keySecret` becomes the new one. */
  setKeySecret(secret: string): Promise<void>;
  /** The answers `dig` gets from this server (short form), for assertions. */
  dig(name: string, type: string): Promise<string[]>;
  stop(): Promise<void>;
}

export interface NamedOptions {
  zones: string[];
  /** Extra zone-file lines per zone (relative or absolute names), e.g. {'example.test': ['api A 127.0.0.1']}. */
  records?: Record<string, string[]>;
  keyName?: string;
}

async function udpFree(addr: string, port: number): Promise<boolean> {
  const s = createSocket('udp4');
  try {
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.bind(port, addr, () => resolve());
    });
    return true;
  } catch {
    return false;
  } finally {
    try {
      s.close();
    } catch {}
  }
}

async function freeAddr(): Promise<string> {
  for (let i = 0; i < 50; i++) {
    const addr = `127.53.${1 + Math.floor(Math.random() * 250)}.${2 + Math.floor(Math.random() * 250)}`;
    if (await udpFree(addr, 53)) return addr;
  }
  throw new Error('no free 127.53.x.y:53 for named');
}

export async function startNamed(opts: NamedOptions): Promise<NamedServer> {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-named-'));
  const keyName = opts.keyName ?? 'rootbox-acme.';
  let keySecret = randomBytes(32).toString('base64');
  let lastErr = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const addr = await freeAddr();
    // named listens only on interface addresses: the test's own /32 on lo, removed by stop()
    await run('ip', ['addr', 'add', `${addr}/32`, 'dev', 'lo']);
    const unaddr = () => run('ip', ['addr', 'del', `${addr}/32`, 'dev', 'lo']).catch(() => undefined);
    const zoneConf = opts.zones
      .map((z) => {
        const lines = [
          '$TTL 60',
          `@ IN SOA ns1.${z}. hostmaster.${z}. 1 3600 600 86400 1`,
          `@ IN NS ns1.${z}.`,
          `ns1 IN A ${addr}`,
          ...(opts.records?.[z] ?? []),
        ];
        writeFileSync(join(dir, `${z}.zone`), lines.join('\n') + '\n');
        return `zone "${z}" { type primary; file "${dir}/${z}.zone"; journal "${dir}/${z}.jnl"; allow-update { key "${keyName}"; }; };`;
      })
      .join('\n');
    writeFileSync(
      join(dir, 'named.conf'),
      `options {
  directory "${dir}";
  pid-file "${dir}/named.pid";
  session-keyfile "${dir}/session.key";
  managed-keys-directory "${dir}";
  listen-on port 53 { ${addr}; };
  listen-on-v6 { none; };
  recursion no;
  dnssec-validation no;
  notify no;
  allow-query { any; };
};
controls { };
key "${keyName}" { algorithm hmac-sha256; secret "${keySecret}"; };
${zoneConf}
`,
    );
    const child: ChildProcess = spawn('/usr/sbin/named', ['-g', '-4', '-n', '1', '-c', join(dir, 'named.conf')], { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    child.stdout!.on('data', (d) => (log += d));
    child.stderr!.on('data', (d) => (log += d));
    const ready = await new Promise<boolean>((resolve) => {
      const t = setTimeout(() => resolve(false), 15_000);
      const check = () => {
        if (/ running\s*$/m.test(log)) {
          clearTimeout(t);
          resolve(true);
        }
      };
      child.stderr!.on('data', check);
      child.once('exit', () => {
        clearTimeout(t);
        resolve(false);
      });
    });
    if (!ready) {
      lastErr = log.slice(-2000);
      child.kill('SIGKILL');
      await unaddr();
      continue;
    }
    child.stdout!.removeAllListeners('data');
    child.stderr!.removeAllListeners('data');
    child.stdout!.resume();
    child.stderr!.resume();
    const pid = child.pid!;
    const server = `${addr}:53`;
    const nsupdate = async (lines: string[]) => {
      const input = [`server ${addr} 53`, `key hmac-sha256:${keyName} ${self.keySecret}`, ...lines, 'send', ''].join('\n');
      const r = await run('nsupdate', [], { input, timeoutMs: 15_000 });
      if (r.code !== 0) throw new Error(`nsupdate failed (${r.code}): ${r.stderr || r.stdout}`);
    };
    const quote = (type: string, value: string) => (type.toUpperCase() === 'TXT' && !value.startsWith('"') ? JSON.stringify(value) : value);
    const self: NamedServer = {
      addr,
      port: 53,
      server,
      zones: opts.zones,
      keyName,
      keyAlgorithm: 'hmac-sha256',
      keySecret,
      dir,
      pid,
      nsupdate,
      add: (name, type, value, ttl = 60) => nsupdate([`update add ${name}. ${ttl} ${type} ${quote(type, value)}`]),
      remove: (name, type) => nsupdate([`update delete ${name}. ${type}`]),
      setKeySecret: async (secret) => {
        const conf = join(dir, 'named.conf');
        writeFileSync(conf, readFileSync(conf, 'utf8').replace(`secret "${keySecret}"`, `secret "${secret}"`));
        keySecret = self.keySecret = secret;
        process.kill(pid, 'SIGHUP');
        // reloaded once an update signed with the new secret is accepted
        for (let i = 0; ; i++) {
          try {
            await nsupdate([`update delete rekey-probe.${opts.zones[0]}. TXT`]);
            return;
          } catch (e) {
            if (i > 50) throw e;
            await new Promise((r) => setTimeout(r, 100));
          }
        }
      },
      dig: async (name, type) => {
        const r = await run('dig', ['+short', '+norec', '+time=2', '+tries=2', `@${addr}`, name, type]);
        return r.stdout.split('\n').filter(Boolean);
      },
      stop: async () => {
        if (child.exitCode === null && child.signalCode === null) {
          const gone = new Promise((r) => child.once('exit', r));
          process.kill(pid, 'SIGTERM');
          const t = setTimeout(() => child.exitCode === null && process.kill(pid, 'SIGKILL'), 5000);
          await gone;
          clearTimeout(t);
        }
        await unaddr();
        rmSync(dir, { recursive: true, force: true });
      },
    };
    return self;
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error(`named did not start: ${lastErr}`);
}
