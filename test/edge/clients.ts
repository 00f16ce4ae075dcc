// Raw-socket clients for the edge tests: send exact bytes (plain TCP or TLS, from a chosen
// loopback source address, optionally shutting the write side afterwards) and read everything the
// edge writes until it closes the connection; plus a parser for the one HTTP/1.1 answer read.

import { connect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';

export interface Answer {
  /** Everything received, as latin1. */
  text: string;
  status: number;
  headers: Record<string, string>;
  body: string;
  /** ms from the connection opening to its close by the edge. */
  closedAfter: number;
  /** The edge closed the connection (false: the timeout ended the wait). */
  closed: boolean;
}

export function parseAnswer(text: string): Pick<Answer, 'status' | 'headers' | 'body'> {
  const end = text.indexOf('\r\n\r\n');
  const lines = (end < 0 ? text : text.slice(0, end)).split('\r\n');
  const headers: Record<string, string> = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  return { status: Number(lines[0].split(' ')[1] ?? 0), headers, body: end < 0 ? '' : text.slice(end + 4) };
}

export interface ExchangeOptions {
  localAddress?: string;
  /** Speak TLS (HTTP/1.1 by ALPN) with this CA and server name. */
  tls?: { ca: string | Buffer; servername: string };
  /** Shut the write side right after sending (a half-close, like `nc -N` or socat at EOF). */
  end?: boolean;
  timeoutMs?: number;
}

/** Opens a connection, sends `payload` (may be empty) and collects the answer until the close. */
export function exchange(port: number, payload: string | Buffer, o: ExchangeOptions = {}): Promise<Answer> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const s: Socket = o.tls
      ? tlsConnect({
          socket: connect({ host: '127.0.0.1', port, localAddress: o.localAddress }),
          ca: o.tls.ca,
          servername: o.tls.servername,
          ALPNProtocols: ['http/1.1'],
        })
      : connect({ host: '127.0.0.1', port, localAddress: o.localAddress });
    const chunks: Buffer[] = [];
    let closed = false;
    const done = () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      resolve({ text, ...parseAnswer(text), closedAfter: Date.now() - t0, closed });
    };
    const timer = setTimeout(() => {
      s.destroy();
    }, o.timeoutMs ?? 10_000);
    s.once(o.tls ? 'secureConnect' : 'connect', () => {
      if (payload.length) s.write(payload);
      if (o.end) s.end();
    });
    s.on('data', (d: Buffer) => chunks.push(d));
    s.on('end', () => (closed = true));
    s.on('error', () => (closed = true));
    s.on('close', done);
  });
}

/** Opens a connection and leaves it open (optionally after sending something); resolves once connected. */
export function hold(port: number, payload: string, localAddress: string): Promise<Socket & { closedAt?: number; received: string }> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port, localAddress }) as Socket & { closedAt?: number; received: string };
    s.received = '';
    s.on('data', (d: Buffer) => (s.received += d.toString('latin1')));
    s.on('error', () => {});
    s.on('close', () => (s.closedAt = Date.now()));
    s.once('connect', () => {
      if (payload) s.write(payload);
      resolve(s);
    });
    s.once('close', () => resolve(s));
  });
}
