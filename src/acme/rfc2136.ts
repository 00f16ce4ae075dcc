// RFC 2136 dynamic update with a TSIG key: one signed UPDATE per TXT value over UDP (TCP when the
// answer is truncated or UDP gets no answer), to the zone's primary. Works with BIND, Knot,
// PowerDNS and most self-hosted DNS.

import { createSocket } from 'node:dgram';
import { isIPv6, Socket } from 'node:net';
import { readAnswer, updateMessage, type TsigKey } from './tsig.js';

export interface Rfc2136Settings {
  /** host, host:port or [v6]:port of the primary. */
  server: string;
  zone: string;
  key: TsigKey;
  ttl?: number;
  timeoutMs?: number;
}

export function hostPort(server: string): { host: string; port: number } {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(server) ?? (isIPv6(server) ? [server, server] : /^([^:]+)(?::(\d+))?$/.exec(server));
  if (!m) throw new Error(`not a DNS server address: ${server}`);
  return { host: m[1], port: Number(m[2] ?? 53) };
}

function udp(host: string, port: number, msg: Buffer, timeoutMs: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const s = createSocket(isIPv6(host) ? 'udp6' : 'udp4');
    const done = (v: Buffer | undefined, e?: Error) => {
      clearTimeout(t);
      s.close();
      if (e) reject(e);
      else resolve(v);
    };
    const t = setTimeout(() => done(undefined), timeoutMs);
    s.on('error', (e) => done(undefined, e));
    s.on('message', (m) => done(m));
    s.send(msg, port, host);
  });
}

function tcp(host: string, port: number, msg: Buffer, timeoutMs: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const s = new Socket();
    let got = Buffer.alloc(0);
    const t = setTimeout(() => s.destroy(new Error(`no answer from ${host}:${port} over TCP`)), timeoutMs);
    s.on('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
    s.on('data', (d) => {
      got = Buffer.concat([got, d]);
      if (got.length >= 2 && got.length >= 2 + got.readUInt16BE(0)) {
        clearTimeout(t);
        s.destroy();
        resolve(got.subarray(2, 2 + got.readUInt16BE(0)));
      }
    });
    s.connect(port, host, () => s.write(Buffer.concat([Buffer.from([msg.length >> 8, msg.length & 0xff]), msg])));
  });
}

export class Rfc2136 {
  constructor(private readonly s: Rfc2136Settings) {}

  /** Sends one signed update; throws with the server's rcode / TSIG error when it is refused. */
  async update(op: 'add' | 'delete', name: string, value: string): Promise<void> {
    const { host, port } = hostPort(this.s.server);
    const timeout = this.s.timeoutMs ?? 5000;
    const { id, msg } = updateMessage(this.s.zone, op, name, value, this.s.ttl ?? 60, this.s.key);
    let raw = await udp(host, port, msg, timeout).catch(() => undefined);
    if (!raw || readAnswer(raw).truncated || readAnswer(raw).id !== id) raw = await tcp(host, port, msg, timeout);
    const a = readAnswer(raw);
    if (a.rcode !== 'NOERROR') {
      throw new Error(`DNS update of ${name} refused by ${this.s.server}: ${a.rcode}${a.tsigError ? ` (TSIG ${a.tsigError})` : ''}`);
    }
  }
}
