// A shared certificate's private key sealed for the registry: AES-256-GCM under a 32-byte cluster
// secret kept in `cluster_secrets` (schema 4) under its own name (`CERT_SECRET_NAME`: made once by
// the first host that needs it, INSERT … ON CONFLICT DO NOTHING, then read back, so every host
// uses the same one), itself sealed under the cluster token (token.ts, schema 14): the registry
// alone opens no key. The certificate's id is the additional data (a key moved to another row
// does not open).

import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/** The name of the cluster secret certificate keys are sealed under. */
export const CERT_SECRET_NAME = 'certificate-keys';

export function sealCertKey(plain: string, k: Buffer, id: string): Buffer {
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', k, iv);
  c.setAAD(Buffer.from(`rootbox certificate key\n${id}`));
  const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
  return Buffer.concat([iv, c.getAuthTag(), body]);
}

export function openCertKey(sealed: Buffer, k: Buffer, id: string): string {
  const d = createDecipheriv('aes-256-gcm', k, sealed.subarray(0, 12));
  d.setAAD(Buffer.from(`rootbox certificate key\n${id}`));
  d.setAuthTag(sealed.subarray(12, 28));
  return Buffer.concat([d.update(sealed.subarray(28)), d.final()]).toString('utf8');
}
