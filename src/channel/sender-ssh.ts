// SSH over the channel (issue 29 item 4). The receiving host authenticates the client itself
// (the key names a server of another host, from the registry) and then needs a byte stream to
// the owner's SSH server: `openSsh` opens one HTTP/2 stream marked `x-rootbox-kind: ssh` with the
// server id and the placement epoch it saw, and hands back the stream once the owner said yes
// (a "not here" costs one fresh look at the registry and one retry, like a forwarded request).
// The stream is an HTTP/2 CONNECT (no :path, so never a forwarded client request with our header).
// The owner's side is owner-ssh.ts. A host that is down or cannot be reached is an AppError at
// once (host_unavailable), never a hang.

import type { ClientHttp2Stream, IncomingHttpHeaders } from 'node:http2';
import type { Duplex } from 'node:stream';
import { systemClock, type Clock } from '../clock.js';
import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Placements, PlacementToRoute } from './lookup.js';
import { hostUnavailable, peerSession } from './sender-outbound.js';
import { CANCEL, type Peers } from './sender-peers.js';
import { CLIENT_PORT, H, NOT_HERE, SSH_KIND } from './wire.js';

/** Who the SSH client is, as the receiving host saw it (for the session's SSH_CLIENT and logs). */
export interface SshClient {
  ip: string;
  port: number;
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
async function ask(d: SshOpenDeps, p: PlacementToRoute, client: SshClient): Promise<Duplex | typeof NOT_HERE> {
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
