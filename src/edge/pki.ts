// A local certificate authority for the embedded defaults: an ECDSA P-256 CA, a wildcard
// certificate for {domain} and *.{domain}, and leaf certificates minted on demand for names a
// wildcard cannot cover (clients refuse `*.localhost`-style wildcards over a single label).

import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import { isIP } from 'node:net';
import { bits, bool, explicit, int, octets, oid, seq, set, time, tlv, utf8 } from './der.js';

const OID = {
  ecdsaSha256: '1.2.840.10045.4.3.2',
  cn: '2.5.4.3',
  org: '2.5.4.10',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
  san: '2.5.29.17',
  ski: '2.5.29.14',
  aki: '2.5.29.35',
};

export interface Issued {
  certPem: string;
  keyPem: string;
}

export interface Ca {
  certPem: string;
  key: KeyObject;
  name: Buffer;
  keyId: Buffer;
}

const pem = (label: string, der: Buffer) =>
  `-----BEGIN ${label}-----\n${der
    .toString('base64')
    .replace(/(.{64})/g, '$1\n')
    .replace(/\n$/, '')}\n-----END ${label}-----\n`;

const name = (cn: string) => seq(set(seq(oid(OID.org), utf8('rootbox'))), set(seq(oid(OID.cn), utf8(cn))));
const ext = (id: string, critical: boolean, value: Buffer) => seq(oid(id), ...(critical ? [bool(true)] : []), octets(value));
const keyIdOf = (pub: KeyObject) =>
  createHash('sha1')
    .update(pub.export({ type: 'spki', format: 'der' }))
    .digest();

function ipBytes(ip: string): Buffer {
  if (isIP(ip) === 4) return Buffer.from(ip.split('.').map(Number));
  const full = ip.includes('::') ? expandV6(ip) : ip.split(':');
  return Buffer.from(
    full.flatMap((h) => {
      const n = parseInt(h || '0', 16);
      return [n >> 8, n & 0xff];
    }),
  );
}
function expandV6(ip: string): string[] {
  const [a, b] = ip.split('::');
  const left = a ? a.split(':') : [];
  const right = b ? b.split(':') : [];
  return [...left, ...Array(8 - left.length - right.length).fill('0'), ...right];
}

function certificate(opts: { subject: Buffer; issuer: Buffer; pub: KeyObject; signer: KeyObject; days: number; extensions: Buffer[] }): Buffer {
  const alg = seq(oid(OID.ecdsaSha256));
  const notBefore = new Date(Date.now() - 3600_000);
  const notAfter = new Date(Date.now() + opts.days * 86_400_000);
  const tbs = seq(
    explicit(0, int(2)),
    int(Buffer.concat([Buffer.from([0x01]), randomBytes(15)])),
    alg,
    opts.issuer,
    seq(time(notBefore), time(notAfter)),
    opts.subject,
    opts.pub.export({ type: 'spki', format: 'der' }) as Buffer,
    explicit(3, seq(...opts.extensions)),
  );
  const sig = sign('sha256', tbs, opts.signer);
  return seq(tbs, alg, bits(sig));
}

export function createCa(commonName: string): { certPem: string; keyPem: string } {
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const subject = name(commonName);
  const der = certificate({
    subject,
    issuer: subject,
    pub: publicKey,
    signer: privateKey,
    days: 3650,
    extensions: [
      ext(OID.basicConstraints, true, seq(bool(true), int(0))),
      ext(OID.keyUsage, true, bits(Buffer.from([0x06]), 1)), // keyCertSign | cRLSign
      ext(OID.ski, false, octets(keyIdOf(publicKey))),
    ],
  });
  return { certPem: pem('CERTIFICATE', der), keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string };
}

export function loadCa(certPem: string, keyPem: string, commonName: string): Ca {
  const key = createPrivateKey(keyPem);
  return { certPem, key, name: name(commonName), keyId: keyIdOf(createPublicKey(key)) };
}

/** Issues a server certificate for the given DNS names / IP addresses, signed by the CA.
 *  `peer`: usable as a client certificate too (the cluster channel's mutual TLS). `keys`: the
 *  leaf's key pair (a new P-256 one when not given). */
export function issueLeaf(ca: Ca, names: string[], days = 365, peer = false, keys?: { publicKey: KeyObject; privateKey: KeyObject }): Issued {
  const { publicKey, privateKey } = keys ?? generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const san = seq(...names.map((n) => (isIP(n) ? tlv(0x87, ipBytes(n)) : tlv(0x82, Buffer.from(n, 'ascii')))));
  const der = certificate({
    subject: name(names[0]),
    issuer: ca.name,
    pub: publicKey,
    signer: ca.key,
    days,
    extensions: [
      ext(OID.basicConstraints, true, seq()),
      ext(OID.keyUsage, true, bits(Buffer.from([0x80]), 7)), // digitalSignature
      ext(OID.extKeyUsage, false, peer ? seq(oid(OID.serverAuth), oid(OID.clientAuth)) : seq(oid(OID.serverAuth))),
      ext(OID.san, false, san),
      ext(OID.aki, false, seq(tlv(0x80, ca.keyId))),
    ],
  });
  return { certPem: pem('CERTIFICATE', der) + ca.certPem, keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string };
}
