// One ACME order with acme-client: the account key (made once, kept 0600 in the data dir), a
// fresh P-256 key and CSR per certificate, challenges of one type (dns-01 through a publisher
// and propagation check, http-01 through the responder the edge serves), and the PEM chain.
// acme-client's own challenge self-check is skipped: DNS-01 is checked against the zone's
// authoritative servers by propagation.ts, HTTP-01 is served by this process. acme-client (with
// axios) is loaded on the first order (lib.ts), not with the daemon: most boxes never order, and
// its load was a fifth of the CPU of a daemon's start.

import { Agent } from 'node:https';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { dirname } from 'node:path';
import type * as Acme from './lib.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Http01Responder } from './http01.js';
import type { DnsPublisher } from './publishers.js';

export type ChallengeType = 'dns-01' | 'http-01';

export interface Issued {
  /** Leaf first, then the chain, PEM. */
  certPem: string;
  /** PKCS#8 PEM of the certificate's private key. */
  keyPem: string;
  notAfter: number;
  names: string[];
}

export interface OrderSettings {
  directory: string;
  email?: string;
  /** Extra PEM roots trusted for the directory's own HTTPS (a test CA). */
  caPem?: string;
  /** File of the ACME account key (PEM), created 0600 when missing. */
  accountKeyFile: string;
  log: Logger;
}

export interface OrderParts {
  dns?: DnsPublisher;
  http01?: Http01Responder;
}

let agentFor: { ca: string | undefined; agent: Agent } | undefined;

let loaded: Promise<typeof Acme> | undefined;
const acmeClient = (): Promise<typeof Acme> => (loaded ??= import('./lib.js'));

/** acme-client talks through one axios instance: its agent trusts the system roots plus caPem. */
function useRoots(acme: typeof Acme, caPem: string | undefined): void {
  if (agentFor && agentFor.ca === caPem) return;
  const agent = new Agent({ keepAlive: false, ca: caPem ? [...rootCertificates, caPem] : undefined });
  acme.axios.defaults.httpsAgent = agent;
  agentFor = { ca: caPem, agent };
}

async function accountKey(acme: typeof Acme, file: string): Promise<Buffer> {
  if (existsSync(file)) return readFileSync(file);
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const key = await acme.crypto.createPrivateEcdsaKey('P-256');
  writeFileSync(file, key, { mode: 0o600, flag: 'wx' });
  return key;
}

// one client per directory and account key: it keeps the account URL, so later orders skip the
// account registration (re-registering an existing account without a contact is an empty update
// some CAs refuse)
const clients = new Map<string, Acme.Client>();
async function clientFor(acme: typeof Acme, s: OrderSettings): Promise<Acme.Client> {
  const id = `${s.directory}\n${s.accountKeyFile}`;
  let c = clients.get(id);
  if (!c) {
    c = new acme.Client({ directoryUrl: s.directory, accountKey: await accountKey(acme, s.accountKeyFile) });
    try {
      await c.createAccount({ termsOfServiceAgreed: true, ...(s.email ? { contact: [`mailto:${s.email}`] } : {}) });
    } catch (e) {
      // an account that exists already (a restart) answers 200 with its URL; acme-client then
      // sends an update, which a CA may refuse when there is nothing to change: the URL is enough
      try {
        c.getAccountUrl();
      } catch {
        throw e;
      }
    }
    clients.set(id, c);
  }
  return c;
}

/** What an ACME or publisher failure says, without stacks (CA problem documents are meant to be read). */
export function reason(e: unknown): string {
  const err = e as { message?: string; detail?: string };
  return String(err?.detail ?? err?.message ?? e).slice(0, 500);
}

export async function order(names: string[], challenge: ChallengeType, s: OrderSettings, parts: OrderParts): Promise<Issued> {
  if (challenge === 'dns-01' && !parts.dns) throw AppError.of('acme_not_configured', 'DNS-01 needs https.acme.dns settings');
  if (challenge === 'http-01' && !parts.http01) throw AppError.of('acme_not_configured', 'HTTP-01 needs the edge plain HTTP listener');
  const acme = await acmeClient();
  useRoots(acme, s.caPem);
  const client = await clientFor(acme, s);
  const [key, csr] = await acme.crypto.createCsr({ commonName: names[0], altNames: names }, await acme.crypto.createPrivateEcdsaKey('P-256'));
  const dnsRecord = (authz: { identifier: { value: string } }) => `_acme-challenge.${authz.identifier.value.replace(/^\*\./, '')}`;
  const cert = await client.auto({
    csr,
    email: s.email,
    termsOfServiceAgreed: true,
    challengePriority: [challenge],
    skipChallengeVerification: true,
    challengeCreateFn: async (authz, ch, keyAuthorization) => {
      if (ch.type === 'dns-01') {
        const name = dnsRecord(authz);
        await parts.dns!.present(name, keyAuthorization);
        await parts.dns!.propagated(name, keyAuthorization, authz.identifier.value.replace(/^\*\./, ''));
      } else if (ch.type === 'http-01') await parts.http01!.set(ch.token, keyAuthorization);
      else throw new Error(`unexpected challenge ${(ch as { type: string }).type}`);
    },
    challengeRemoveFn: async (authz, ch, keyAuthorization) => {
      if (ch.type === 'dns-01') await parts.dns!.cleanup(dnsRecord(authz), keyAuthorization);
      else if (ch.type === 'http-01') await parts.http01!.delete(ch.token);
    },
  });
  const leaf = new X509Certificate(cert.split(/(?<=-----END CERTIFICATE-----)/)[0]);
  return { certPem: cert, keyPem: key.toString(), notAfter: Date.parse(leaf.validTo), names };
}
