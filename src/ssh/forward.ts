// direct-tcpip (`ssh -L`): a TCP connection from the daemon to a port of the server's own
// container address. `localhost`, 127.0.0.1 and ::1 mean the server itself (as they would on a
// real machine) and are mapped to its container IP; every other destination is refused with a
// reason the OpenSSH client prints ("open failed: administratively prohibited: …").

import { connect } from 'node:net';
import type { Connection, ServerChannel, TcpipRequestInfo } from 'ssh2';
import { AppError, errorFields, publicDetail } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Target } from './target.js';

const OPEN_FAILURE = { ADMINISTRATIVELY_PROHIBITED: 1, CONNECT_FAILED: 2 } as const;
const SELF = new Set(['localhost', '127.0.0.1', '::1', 'ip6-localhost', '0.0.0.0']);

export interface ForwardDeps {
  target: Target;
  log: Logger;
  onConnectionClose(fn: () => void): () => void;
  connectTimeoutMs?: number;
}

type Proto = { channelOpenFail(recipient: number, reason: number, desc?: string): void };

/**
 * Rejects a channel open with a description. ssh2's reject() always sends an empty one, so the
 * protocol call is wrapped for the duration of that synchronous reject.
 */
export function rejectWithReason(client: Connection, reject: () => void, code: number, desc: string): void {
  const proto = (client as unknown as { _protocol?: Proto })._protocol;
  if (!proto || typeof proto.channelOpenFail !== 'function') return reject();
  const orig = proto.channelOpenFail;
  proto.channelOpenFail = (recipient: number) => orig.call(proto, recipient, code, desc);
  try {
    reject();
  } finally {
    proto.channelOpenFail = orig;
  }
}

export function forwardTcp(client: Connection, accept: () => ServerChannel, reject: () => void, info: TcpipRequestInfo, deps: ForwardDeps): void {
  const { target, log } = deps;
  const refuse = (code: number, why: string) => rejectWithReason(client, reject, code, why);
  const port = Number(info.destPort);
  if (!Number.isInteger(port) || port < 1 || port > 65535) return refuse(OPEN_FAILURE.ADMINISTRATIVELY_PROHIBITED, `bad port ${info.destPort}`);
  const refusal = target.refusal();
  if (refusal) return refuse(OPEN_FAILURE.ADMINISTRATIVELY_PROHIBITED, refusal);

  void (async () => {
    let ip: string;
    try {
      ip = (await target.ready()).ip;
    } catch (e) {
      if (!(e instanceof AppError)) log.error('ssh forward: server could not be made ready', { server: target.id, err: errorFields(e) });
      return refuse(OPEN_FAILURE.CONNECT_FAILED, publicDetail(e));
    }
    const dest = String(info.destIP).toLowerCase();
    if (dest !== ip && !SELF.has(dest)) {
      return refuse(OPEN_FAILURE.ADMINISTRATIVELY_PROHIBITED, `rootbox forwards only to this server itself (localhost or ${ip}), not to ${info.destIP}`);
    }
    const sock = connect({ host: ip, port });
    const timer = setTimeout(() => sock.destroy(new Error('connect timed out')), deps.connectTimeoutMs ?? 10_000);
    let channel: ServerChannel | undefined;
    let release: (() => void) | undefined;
    const unregister = deps.onConnectionClose(() => sock.destroy());
    sock.once('connect', () => {
      clearTimeout(timer);
      channel = accept();
      if (!channel) return sock.destroy();
      release = target.hold();
      log.debug('ssh forward open', { server: target.id, port });
      channel.on('error', () => sock.destroy());
      channel.on('close', () => sock.destroy());
      channel.pipe(sock);
      sock.pipe(channel);
    });
    sock.on('error', (e) => {
      clearTimeout(timer);
      if (!channel) refuse(OPEN_FAILURE.CONNECT_FAILED, `connect to port ${port} failed: ${publicCode(e)}`);
      else channel.destroy();
    });
    sock.on('close', () => {
      clearTimeout(timer);
      unregister();
      release?.();
      release = undefined;
      if (channel) channel.end();
    });
  })();
}

/** An errno-style code (ECONNREFUSED…) is safe to show; a message may name host addresses. */
function publicCode(e: Error): string {
  const code = (e as NodeJS.ErrnoException).code;
  return typeof code === 'string' && /^[A-Z][A-Z0-9_]{1,39}$/.test(code) ? code : 'connection error';
}
