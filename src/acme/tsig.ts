// DNS wire pieces for RFC 2136 updates: names, resource records, the UPDATE message and its
// TSIG signature (RFC 8945, HMAC-SHA256/384/512), and reading the answer's rcode and TSIG error.

import { createHmac, randomInt } from 'node:crypto';

export const TYPE = { SOA: 6, TXT: 16, TSIG: 250 } as const;
const CLASS = { IN: 1, NONE: 254, ANY: 255 } as const;
const OPCODE_UPDATE = 5;

export type TsigAlgorithm = 'hmac-sha256' | 'hmac-sha384' | 'hmac-sha512';
export interface TsigKey {
  name: string;
  algorithm: TsigAlgorithm;
  /** base64 */
  secret: string;
}

export function encodeName(name: string): Buffer {
  const labels = name.replace(/\.$/, '').split('.').filter(Boolean);
  const parts: Buffer[] = [];
  for (const l of labels) {
    const b = Buffer.from(l, 'ascii');
    if (b.length > 63) throw new Error(`DNS label too long: ${l.slice(0, 20)}…`);
    parts.push(Buffer.from([b.length]), b);
  }
  parts.push(Buffer.from([0]));
  return Buffer.concat(parts);
}

const u16 = (n: number) => Buffer.from([(n >> 8) & 0xff, n & 0xff]);
const u32 = (n: number) => Buffer.from([(n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff]);
const u48 = (n: number) => Buffer.concat([u16(Math.floor(n / 2 ** 32)), u32(n >>> 0)]);

function txtRdata(value: string): Buffer {
  const b = Buffer.from(value, 'utf8');
  const chunks: Buffer[] = [];
  for (let i = 0; i < b.length || i === 0; i += 255) {
    const c = b.subarray(i, i + 255);
    chunks.push(Buffer.from([c.length]), c);
    if (b.length === 0) break;
  }
  return Buffer.concat(chunks);
}

function rr(name: string, type: number, cls: number, ttl: number, rdata: Buffer): Buffer {
  return Buffer.concat([encodeName(name), u16(type), u16(cls), u32(ttl), u16(rdata.length), rdata]);
}

/** An UPDATE for `zone` adding (ttl > 0) or deleting one TXT value, signed with the key. */
export function updateMessage(zone: string, op: 'add' | 'delete', name: string, value: string, ttl: number, key: TsigKey, now = Date.now()) {
  const id = randomInt(0, 0x10000);
  const update = op === 'add' ? rr(name, TYPE.TXT, CLASS.IN, ttl, txtRdata(value)) : rr(name, TYPE.TXT, CLASS.NONE, 0, txtRdata(value));
  const header = Buffer.concat([u16(id), u16(OPCODE_UPDATE << 11), u16(1), u16(0), u16(1), u16(0)]);
  const body = Buffer.concat([header, encodeName(zone), u16(TYPE.SOA), u16(CLASS.IN), update]);
  const time = Math.floor(now / 1000);
  const fudge = 300;
  const alg = encodeName(key.algorithm);
  const keyName = encodeName(key.name.toLowerCase());
  const vars = Buffer.concat([keyName, u16(CLASS.ANY), u32(0), alg, u48(time), u16(fudge), u16(0), u16(0)]);
  const mac = createHmac(key.algorithm.slice(5), Buffer.from(key.secret, 'base64'))
    .update(Buffer.concat([body, vars]))
    .digest();
  const rdata = Buffer.concat([alg, u48(time), u16(fudge), u16(mac.length), mac, u16(id), u16(0), u16(0)]);
  const tsig = rr(key.name.toLowerCase(), TYPE.TSIG, CLASS.ANY, 0, rdata);
  const msg = Buffer.concat([body, tsig]);
  msg.writeUInt16BE(1, 10); // ARCOUNT: the TSIG record
  return { id, msg, mac };
}

const RCODES = ['NOERROR', 'FORMERR', 'SERVFAIL', 'NXDOMAIN', 'NOTIMP', 'REFUSED', 'YXDOMAIN', 'YXRRSET', 'NXRRSET', 'NOTAUTH', 'NOTZONE'];
const TSIG_ERRORS: Record<number, string> = { 16: 'BADSIG', 17: 'BADKEY', 18: 'BADTIME', 22: 'BADTRUNC' };

function skipName(buf: Buffer, off: number): number {
  for (;;) {
    const len = buf[off];
    if (len === undefined) throw new Error('truncated DNS name');
    if ((len & 0xc0) === 0xc0) return off + 2;
    if (len === 0) return off + 1;
    off += len + 1;
  }
}

/** The answer's id, flags and rcode, and the TSIG error it carries (BADSIG, BADKEY, BADTIME) if any. */
export function readAnswer(buf: Buffer): { id: number; truncated: boolean; rcode: string; tsigError?: string } {
  if (buf.length < 12) throw new Error('short DNS answer');
  const id = buf.readUInt16BE(0);
  const flags = buf.readUInt16BE(2);
  const rcode = RCODES[flags & 0xf] ?? `RCODE${flags & 0xf}`;
  let tsigError: string | undefined;
  try {
    const counts = [4, 6, 8, 10].map((o) => buf.readUInt16BE(o));
    let off = 12;
    for (let i = 0; i < counts[0]; i++) off = skipName(buf, off) + 4;
    for (let i = 0; i < counts[1] + counts[2] + counts[3]; i++) {
      off = skipName(buf, off);
      const type = buf.readUInt16BE(off);
      const rdlen = buf.readUInt16BE(off + 8);
      const rd = off + 10;
      if (type === TYPE.TSIG) {
        let p = skipName(buf, rd) + 8; // algorithm, time signed, fudge
        p += 2 + buf.readUInt16BE(p) + 2; // MAC size, MAC, original id
        const err = buf.readUInt16BE(p);
        if (err) tsigError = TSIG_ERRORS[err] ?? `TSIG error ${err}`;
      }
      off = rd + rdlen;
    }
  } catch {
    // an answer we cannot walk still has its rcode
  }
  return { id, truncated: (flags & 0x0200) !== 0, rcode, tsigError };
}
