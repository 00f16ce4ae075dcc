// A real ACME server for tests: Debian's `pebble` (Let's Encrypt's test CA) on 127.0.0.1 with
// ports of its own, its own HTTPS certificate (minted here by a throwaway CA, since the package
// ships none), PEBBLE_VA_NOSLEEP=1 (no random validation sleeps), PEBBLE_WFE_NONCEREJECT=0 (no
// deliberately rejected nonces) and `-dnsserver` pointing at the test's named. HTTP-01 is checked
// on `httpPort` of the address the name resolves to (point it at the daemon's plain listener),
// TLS-ALPN-01 on `tlsPort`. stop() ends the process by its PID and removes the dir.
//
//   const ca = await startPebble({ dnsServer: dns.server, httpPort: daemonHttpPort });
//   ca.directory   // https://127.0.0.1:<port>/dir   (trust ca.caPem for it: https.acme.caFile = ca.caFile)
//   await ca.issuingRoot()  // PEM of the root Pebble signs certificates under (curl --cacert)

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { freePort } from './ports.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCa, issueLeaf, loadCa } from '../../src/edge/pki.js';

export interface PebbleServer {
  /** The ACME directory URL. */
  directory: string;
  /** PEM of the CA that signed Pebble's own HTTPS certificate (for the ACME client). */
  caPem: string;
  /** The same PEM written to a file (for `https.acme.caFile`). */
  caFile: string;
  /** https://127.0.0.1:<port> of the management interface. */
  management: string;
  pid: number;
  dir: string;
  /** The root certificate Pebble issues under (regenerated on every launch), from /roots/0. */
  issuingRoot(): Promise<string>;
  /** Writes the issuing root to a file in the scratch dir and returns its path (for curl --cacert). */
  issuingRootFile(): Promise<string>;
  stop(): Promise<void>;
}

export interface PebbleOptions {
  /** `host:port` of the DNS server Pebble resolves names through (named's `server`). */
  dnsServer: string;
  /** Port HTTP-01 validation connects to (the daemon's plain HTTP listener). Default 5002. */
  httpPort?: number;
  /** Port TLS-ALPN-01 validation connects to. Default 5001. */
  tlsPort?: number;
  /** Validity of issued certificates in seconds (Pebble's certificateValidityPeriod); default Pebble's (~5 years). */
  validitySeconds?: number;
}

export { freePort };

function get(url: string, ca: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { ca, timeout: 3000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

export async function startPebble(opts: PebbleOptions): Promise<PebbleServer> {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-pebble-'));
  const ca = createCa('rootbox test CA for pebble');
  const leaf = issueLeaf(loadCa(ca.certPem, ca.keyPem, 'rootbox test CA for pebble'), ['localhost', '127.0.0.1']);
  writeFileSync(join(dir, 'cert.pem'), leaf.certPem);
  writeFileSync(join(dir, 'key.pem'), leaf.keyPem, { mode: 0o600 });
  const caFile = join(dir, 'ca.pem');
  writeFileSync(caFile, ca.certPem);
  let lastErr = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const [acmePort, mgmtPort] = [await freePort(), await freePort()];
    if (acmePort === mgmtPort) continue;
    const config = {
      pebble: {
        listenAddress: `127.0.0.1:${acmePort}`,
        managementListenAddress: `127.0.0.1:${mgmtPort}`,
        certificate: join(dir, 'cert.pem'),
        privateKey: join(dir, 'key.pem'),
        httpPort: opts.httpPort ?? 5002,
        tlsPort: opts.tlsPort ?? 5001,
        ocspResponderURL: '',
        externalAccountBindingRequired: false,
        ...(opts.validitySeconds ? { certificateValidityPeriod: opts.validitySeconds } : {}),
      },
    };
    writeFileSync(join(dir, 'pebble.json'), JSON.stringify(config));
    const child: ChildProcess = spawn('pebble', ['-config', join(dir, 'pebble.json'), '-dnsserver', opts.dnsServer, '-strict=false'], {
      env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0', PEBBLE_AUTHZREUSE: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    child.stdout!.on('data', (d) => (log += d));
    child.stderr!.on('data', (d) => (log += d));
    const directory = `https://127.0.0.1:${acmePort}/dir`;
    const management = `https://127.0.0.1:${mgmtPort}`;
    let up = false;
    for (let i = 0; i < 100 && child.exitCode === null; i++) {
      try {
        if ((await get(directory, ca.certPem)).status === 200) {
          up = true;
          break;
        }
      } catch {}
      await new Promise((r) => setTimeout(r, 100));
    }
    if (!up) {
      lastErr = log.slice(-2000);
      child.kill('SIGKILL');
      continue;
    }
    // keep draining its output (pebble logs every request) without holding it
    child.stdout!.removeAllListeners('data');
    child.stderr!.removeAllListeners('data');
    child.stdout!.resume();
    child.stderr!.resume();
    const issuingRoot = async () => {
      const r = await get(`${management}/roots/0`, ca.certPem);
      if (r.status !== 200) throw new Error(`pebble /roots/0 answered ${r.status}`);
      return r.body;
    };
    return {
      directory,
      caPem: ca.certPem,
      caFile,
      management,
      pid: child.pid!,
      dir,
      issuingRoot,
      issuingRootFile: async () => {
        const f = join(dir, 'issuing-root.pem');
        writeFileSync(f, await issuingRoot());
        return f;
      },
      stop: async () => {
        if (child.exitCode === null && child.signalCode === null) {
          const gone = new Promise((r) => child.once('exit', r));
          process.kill(child.pid!, 'SIGTERM');
          const t = setTimeout(() => child.exitCode === null && process.kill(child.pid!, 'SIGKILL'), 5000);
          await gone;
          clearTimeout(t);
        }
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error(`pebble did not start: ${lastErr}`);
}
