// TLS on the edge's own admitted connections: a node TLS server that never listens is handed
// each connection (emit 'connection') and makes the handshake — ALPN h2 or http/1.1, the
// certificate chosen by SNI from the TlsManager — and gives back the TLS socket with the plain
// connection it runs over (the guard links the two), found by the peer's address and port. The
// name a ClientHello asks for is told (`named`) before its certificate is chosen.
// Public APIs only: nothing is taken from node's listeners or a socket's internals.

import type { Socket } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from 'node:tls';
import type { Logger } from '../log/index.js';
import type { TlsManager } from './tls.js';

const peerKey = (s: { remoteAddress?: string; remotePort?: number }) => `${s.remoteAddress}|${s.remotePort}`;

export class Handshakes {
  private readonly server: TlsServer;
  /** Connections in their TLS handshake, by peer address and port. */
  private readonly pending = new Map<string, Socket>();

  /** `secured`: a finished handshake, with the plain connection under it (when still known);
   *  `named`: the server name of a ClientHello (SNI), as the client sent it. */
  constructor(tls: TlsManager, log: Logger, secured: (t: TLSSocket, raw: Socket | undefined) => void, named?: (name: string) => void) {
    this.server = createTlsServer(
      {
        ALPNProtocols: ['h2', 'http/1.1'],
        SNICallback: (name, cb) => {
          named?.(name);
          try {
            cb(null, tls.contextFor(name));
          } catch (e) {
            log.warn('SNI failed', { name: String(name).slice(0, 100), err: (e as Error).message });
            cb(e as Error);
          }
        },
      },
      (t) => {
        const k = peerKey(t);
        const raw = this.pending.get(k);
        this.pending.delete(k);
        secured(t, raw);
      },
    );
    this.server.on('tlsClientError', (err) => log.debug('TLS client error', { err: err.message }));
  }

  /** Starts the handshake on an admitted connection. */
  begin(sock: Socket): void {
    const k = peerKey(sock);
    this.pending.set(k, sock);
    sock.once('close', () => this.pending.get(k) === sock && this.pending.delete(k));
    this.server.emit('connection', sock);
  }
}
