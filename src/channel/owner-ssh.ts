// SSH over the channel, the owner's side (the sender's is sender-ssh.ts): `ownerSsh` checks that
// an `x-rootbox-kind: ssh` stream names a server this host runs at the epoch the sender saw (else
// 421) and is no loop, then hands the stream, as the connection's socket, to its own SSH server in
// a mode that is already authenticated for that server: only streams that came over the
// mutual-TLS channel get there, never a connection to the public SSH port.

import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { Logger } from '../log/index.js';
import type { Placements } from './lookup.js';
import type { SshClient } from './sender-ssh.js';
import { CLIENT_PORT, H, NOT_HERE } from './wire.js';

/** The owner's SSH server: takes a stream from the channel as an authenticated connection to `serverId`. */
export interface SshAcceptor {
  acceptForwarded(socket: Duplex, serverId: string, client: SshClient): void;
}

export interface OwnerSshDeps {
  self: string;
  /** The host the channel session's certificate names. */
  peer: string | undefined;
  servers: { get(id: string): { id: string } | undefined };
  placements: Pick<Placements, 'byServer'>;
  ssh?: SshAcceptor;
  log: Logger;
}

const one = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/** The owner's side: an `x-rootbox-kind: ssh` stream checked (loop, here at that epoch) and handed to the SSH server. */
export function ownerSsh(stream: ServerHttp2Stream, h: IncomingHttpHeaders, d: OwnerSshDeps): void {
  stream.on('error', () => {});
  if (h[':method'] !== 'CONNECT') {
    d.log.warn('an SSH stream that is not a CONNECT refused', { from: d.peer });
    return void stream.respond({ ':status': 400 }, { endStream: true });
  }
  const id = one(h[H.server]) ?? '';
  if (d.peer === d.self || Number(h[H.hops] ?? 0) > 1) {
    d.log.warn('forwarding loop refused', { from: d.peer, kind: 'ssh' });
    return void stream.respond({ ':status': 502 }, { endStream: true });
  }
  const mine = d.servers.get(id);
  const placed = mine && d.placements.byServer(id);
  if (!mine || !d.ssh || (placed && (placed.host !== d.self || placed.epoch !== Number(h[H.epoch])))) {
    return void stream.respond({ ':status': NOT_HERE, [H.notHere]: '1' }, { endStream: true });
  }
  const client = { ip: one(h[H.ip]) ?? '', port: Number(one(h[CLIENT_PORT]) ?? 0) || 0 };
  stream.respond({ ':status': 200 });
  d.ssh.acceptForwarded(stream, id, client);
}
