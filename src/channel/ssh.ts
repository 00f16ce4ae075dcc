// SSH over the channel (issue 29 item 4). The receiving host authenticates the client itself
// (the key names a server of another host, from the registry) and then needs a byte stream to
// the owner's SSH server: `openSsh` opens one HTTP/2 stream marked `x-rootbox-kind: ssh` with the
// server id and the placement epoch it saw, and hands back the stream once the owner said yes
// (a "not here" costs one fresh look at the registry and one retry, like a forwarded request).
// The stream is an HTTP/2 CONNECT (no :path, so never a forwarded client request with our header).
// On the owner, `ownerSsh` checks the server is its own at that epoch (else 421) and hands the
// stream, as the connection's socket, to its own SSH server in a mode that is already
// authenticated for that server: only streams that came over the mutual-TLS channel get there,
// never a connection to the public SSH port. A host that is down or cannot be reached is an
// AppError at once (host_unavailable), never a hang.

import type { ClientHttp2Stream, IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import type { Duplex } from 'node:stream';
import { systemClock, type Clock } from '../clock.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Placements, PlacementView } from './lookup.js';
import { hostUnavailable, peerSession } from './outbound.js';
import { CANCEL, type Peers } from './peers.js';
import { H, NOT_HERE } from './wire.js';

/** The stream kind: an SSH connection, not an HTTP request for the proxy. */
export const SSH_KIND = 'x-rootbox-kind';
const CLIENT_PORT = 'x-rootbox-client-port';

/** Who the SSH client is, as the receiving host saw it (for the session's SSH_CLIENT and logs). */
export interface SshClient {
  ip: string;
  port: number;
}

/** The owner's SSH server: takes a stream from the channel as an authenticated connection to `serverId`. */
export interface SshAcceptor {
  acceptForwarded(socket: Duplex, serverId: string, client: SshClient): void;
}

export interface SshOpenDeps {
  peers: Peers;
  placements: Placements;
  self: string;
  /** How long the owner may take to answer the stream (cluster.forwardConnectTimeout). */
  timeoutMs: number;
  log: Logger;
  /** The open timeout's time (tests move it). */
  clock?: Clock;
}

/** A stream to the owner's SSH server for `serverId`, or an AppError saying why there is none. */
export async function openSsh(d: SshOpenDeps, serverId: string, client: SshClient): Promise<Duplex> {
  const p = d.placements.byServer(serverId);
  if (!p || p.host === d.self) throw AppError.of('server_not_found', `server ${serverId} is not placed on any other host`);
  const first = await ask(d, p, client);
  if (first !== NOT_HERE) return first;
  const now = await d.placements.fresh(p.slug).catch(() => undefined);
  if (!now || now.serverId !== serverId || now.host === d.self || (now.host === p.host && now.epoch === p.epoch)) {
    throw hostUnavailable(p.host, 'no longer runs it');
  }
  const second = await ask(d, now, client);
  if (second === NOT_HERE) throw hostUnavailable(now.host, 'no longer runs it');
  return second;
}

/** One try: the accepted stream, or NOT_HERE. */
async function ask(d: SshOpenDeps, p: PlacementView, client: SshClient): Promise<Duplex | typeof NOT_HERE> {
  const session = await peerSession(d, p.host);
  if (session instanceof AppError) throw session;
  let stream: ClientHttp2Stream;
  try {
    stream = session.request(
      {
        // CONNECT has no :path or :scheme, which every forwarded HTTP request carries: no client's
        // request can become an SSH stream, whatever headers a forwarding path lets through
        ':method': 'CONNECT',
        ':authority': p.host,
        [SSH_KIND]: 'ssh',
        [H.server]: p.serverId,
        [H.epoch]: String(p.epoch),
        [H.ip]: client.ip,
        [CLIENT_PORT]: String(client.port),
        [H.hops]: '1',
      },
      { endStream: false },
    );
  } catch {
    throw hostUnavailable(p.host, 'cannot be reached');
  }
  return new Promise((resolve, reject) => {
    const fail = () => {
      timer.cancel();
      reject(hostUnavailable(p.host, 'cannot be reached'));
    };
    const timer = (d.clock ?? systemClock).after(d.timeoutMs, () => {
      stream.off('close', fail);
      stream.close(CANCEL);
      reject(hostUnavailable(p.host, `did not answer within ${d.timeoutMs} ms`));
    });
    stream.once('error', fail);
    stream.once('close', fail);
    stream.once('response', (h: IncomingHttpHeaders) => {
      timer.cancel();
      stream.off('error', fail);
      stream.off('close', fail);
      stream.on('error', () => {});
      const status = Number(h[':status']);
      if (status === 200) return resolve(stream);
      stream.close(CANCEL);
      if (status === NOT_HERE) return resolve(NOT_HERE);
      if (status === 502) return reject(AppError.of('forward_loop', `the channel address of ${p.host} leads back to ${d.self}`));
      reject(hostUnavailable(p.host, 'refused the connection'));
    });
  });
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
