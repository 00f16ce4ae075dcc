// What `rootbox status` says about the host and the configuration, the same whether the daemon
// answers or the CLI reads it while the daemon is stopped: memory and disk headroom, the HTTPS
// certificate's expiry (read from the file the TLS manager serves: the operator's https.cert, or
// the generated <dataDir>/tls/cert.pem), and which outside services are configured — present or
// not, never a secret's value.

import { X509Certificate } from 'node:crypto';
import { existsSync, readFileSync, statfsSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import type { Config } from '../config/index.js';

export interface HostFacts {
  memory: { total_bytes: number; available_bytes: number };
  disk: { path: string; total_bytes: number; free_bytes: number };
  load: number[];
}

function meminfo(): { total: number; available: number } {
  const text = readFileSync('/proc/meminfo', 'utf8');
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * 1024;
  return { total: kb('MemTotal'), available: kb('MemAvailable') };
}

export function hostFacts(dataDir: string): HostFacts {
  const m = meminfo();
  const s = statfsSync(dataDir);
  return {
    memory: { total_bytes: m.total, available_bytes: m.available },
    disk: { path: dataDir, total_bytes: s.blocks * s.bsize, free_bytes: s.bavail * s.bsize },
    load: loadavg().map((n) => Math.round(n * 100) / 100),
  };
}

export interface CertificateFacts {
  source: 'files' | 'generated';
  file: string;
  subject?: string;
  names?: string[];
  not_after?: string;
  days_left?: number;
  error?: string;
}

export function certificateFacts(cfg: Pick<Config, 'dataDir' | 'https'>, now = Date.now()): CertificateFacts {
  const source = cfg.https.cert ? 'files' : 'generated';
  const file = cfg.https.cert ?? join(cfg.dataDir, 'tls', 'cert.pem');
  if (!existsSync(file)) return { source, file, error: 'no certificate yet (the daemon makes it at its first start)' };
  try {
    const cert = new X509Certificate(readFileSync(file));
    const until = new Date(cert.validTo);
    return {
      source,
      file,
      subject: cert.subject.replace(/\n/g, ', '),
      names: (cert.subjectAltName ?? '')
        .split(', ')
        .filter(Boolean)
        .map((n) => n.replace(/^DNS:/, '')),
      not_after: until.toISOString(),
      days_left: Math.floor((until.getTime() - now) / 86_400_000),
    };
  } catch (e) {
    return { source, file, error: `cannot read the certificate: ${(e as Error).message}` };
  }
}

/** Scheme, host and port of a URL (a path or query may carry a token). */
function origin(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return '(unparsable)';
  }
}

/** Which outside services are configured. Values that are secrets are reported as set or not. */
export function configFacts(cfg: Readonly<Config>) {
  const { llm, x402 } = cfg.verify;
  const sms = cfg.hosting.sms;
  return {
    domain: cfg.domain,
    payments: {
      configured: Boolean(x402.payTo),
      network: x402.network,
      pay_to: x402.payTo ?? null,
      facilitator: origin(x402.facilitatorUrl),
    },
    llm: {
      configured: Boolean(llm.baseUrl && llm.models.length > 0),
      base_url_set: Boolean(llm.baseUrl),
      api_key_set: Boolean(llm.apiKey),
      models: llm.models,
    },
    sms: {
      provider: sms.provider,
      configured: sms.provider === 'log' || Boolean(sms.twilioAccountSid && sms.twilioAuthToken && sms.twilioFrom),
      auth_token_set: Boolean(sms.twilioAuthToken),
    },
  };
}
