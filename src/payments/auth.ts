// Authentication of requests to the x402 facilitator. `cdp`: a fresh JWT per request as the
// Coinbase CDP API requires — header {alg ES256 (EC PEM key) or EdDSA (base64 Ed25519 key),
// kid: key id, typ: JWT, nonce}, claims {iss: "cdp", sub: key id, aud: ["cdp_service"],
// uris: ["METHOD host/path"], iat, nbf, exp = +120 s} — sent as `Authorization: Bearer`.
// `headers`: fixed headers from the config. The key and header values are never logged.

import { createPrivateKey, randomBytes, type KeyObject } from 'node:crypto';
import { SignJWT } from 'jose';

/** Headers to add to one facilitator request. */
export type FacilitatorAuth = (method: string, url: string) => Promise<Record<string, string>>;

export interface AuthSettings {
  facilitatorAuth: 'none' | 'cdp' | 'headers';
  cdpKeyId?: string;
  cdpKeySecret?: string;
  facilitatorHeaders?: Record<string, string>;
}

/** Lifetime of one CDP JWT, as the CDP SDK makes them. */
export const CDP_JWT_SECONDS = 120;

interface SigningKey {
  alg: 'ES256' | 'EdDSA';
  key: KeyObject;
}

/** Reads a CDP key secret: an EC key in PEM (SEC1 or PKCS#8), or 64 base64 bytes (Ed25519 seed + public key). */
export function cdpSigningKey(secret: string): SigningKey {
  const text = secret.includes('\\n') && !secret.includes('\n') ? secret.replace(/\\n/g, '\n') : secret;
  if (text.includes('-----BEGIN')) {
    let key: KeyObject;
    try {
      key = createPrivateKey(text);
    } catch {
      throw new Error('verify.x402.cdpKeySecret: the PEM key cannot be read');
    }
    if (key.asymmetricKeyType === 'ec') return { alg: 'ES256', key };
    if (key.asymmetricKeyType === 'ed25519') return { alg: 'EdDSA', key };
    throw new Error(`verify.x402.cdpKeySecret: a ${key.asymmetricKeyType} key is not a CDP key (EC P-256 or Ed25519)`);
  }
  const raw = Buffer.from(text.trim(), 'base64');
  if (raw.length !== 64) throw new Error('verify.x402.cdpKeySecret: neither an EC key in PEM nor a base64 Ed25519 key of 64 bytes');
  const jwk = { kty: 'OKP', crv: 'Ed25519', d: raw.subarray(0, 32).toString('base64url'), x: raw.subarray(32).toString('base64url') };
  try {
    return { alg: 'EdDSA', key: createPrivateKey({ key: jwk, format: 'jwk' }) };
  } catch {
    throw new Error('verify.x402.cdpKeySecret: the Ed25519 key cannot be read');
  }
}

/** One CDP JWT for a request (method and URL as sent). */
export async function cdpJwt(keyId: string, key: SigningKey, method: string, url: string, nowSeconds = Math.floor(Date.now() / 1000)): Promise<string> {
  const u = new URL(url);
  return new SignJWT({ sub: keyId, iss: 'cdp', aud: ['cdp_service'], uris: [`${method.toUpperCase()} ${u.host}${u.pathname}`] })
    .setProtectedHeader({ alg: key.alg, kid: keyId, typ: 'JWT', nonce: randomBytes(16).toString('hex') })
    .setIssuedAt(nowSeconds)
    .setNotBefore(nowSeconds)
    .setExpirationTime(nowSeconds + CDP_JWT_SECONDS)
    .sign(key.key);
}

/** The auth of the config; undefined for `none`. Bad keys fail here, at start, not per request. */
export function facilitatorAuth(s: AuthSettings): FacilitatorAuth | undefined {
  if (s.facilitatorAuth === 'cdp') {
    if (!s.cdpKeyId || !s.cdpKeySecret) throw new Error('verify.x402.facilitatorAuth cdp needs cdpKeyId and cdpKeySecret');
    const id = s.cdpKeyId;
    const key = cdpSigningKey(s.cdpKeySecret);
    return async (method, url) => ({ authorization: `Bearer ${await cdpJwt(id, key, method, url)}` });
  }
  if (s.facilitatorAuth === 'headers') {
    const fixed = { ...(s.facilitatorHeaders ?? {}) };
    return async () => fixed;
  }
  return undefined;
}
