// Opening one session of the channel's client side (sender-peers.ts keeps them): an HTTP/2
// session to a peer host's advertise address with this host's certificate, accepting only a
// server certificate of the cluster CA naming the host it meant (one naming this host itself is a
// loop: an advertise address pointing back here). It is ready once the owner took it (its first
// SETTINGS arrived: an owner that refuses this host closes the connection before) and its
// certificate carries the key the owner's host registered (the same check the owner makes of this
// host, owner-admit.ts). Opening takes at most connectTimeout, a socket that never connected (a
// partition) included.

import { connect, type ClientHttp2Session } from 'node:http2';
import { connect as tlsConnect, type ConnectionOptions, type PeerCertificate, type TLSSocket } from 'node:tls';
import { systemClock, type Clock } from '../clock.js';
import type { Logger } from '../log/index.js';
import type { ChannelHealth } from './sender-health.js';
import { peerHost, peerKey, type Identity } from './identity.js';
import { SESSION_WINDOW, WINDOW } from './wire.js';

/** Why a peer could not be reached: a loop (its address leads back here) or anything else. */
export class PeerError extends Error {
  constructor(
    readonly loop: boolean,
    message: string,
    /** The peer was reached and refused this host, or was not the host registered under its name. */
    readonly refused = false,
  ) {
    super(message);
  }
}

/** Whether a channel peer naming `host` with certificate key `key` is that host (owner-admit.ts's PeerAdmission). */
export interface PeerCheck {
  admit(host: string, key: string | undefined): Promise<boolean>;
}

export interface ConnectOptions {
  /** This host's certificate; undefined while the channel is not up (no peer is reached). */
  identity: () => Identity | undefined;
  connectTimeoutMs: number;
  log: Logger;
  health?: ChannelHealth;
  /** Whether a peer's certificate carries the key its host registered (none: any certificate of the cluster CA naming it). */
  admit?: PeerCheck;
  /** The connect timeout's time (tests move it). */
  clock?: Clock;
}

/** What the keeper of the sessions (Peers) hears of one it opened. */
export interface SessionEvents {
  /** The session is ready (the owner took this host, its key checked), before it is handed out. */
  ready(session: ClientHttp2Session): void;
  /** The session closed, ready or not (before the health hears of it). */
  closed(session: ClientHttp2Session): void;
}

/** Opens a session to `host` at `advertise`: resolved once ready, rejected with a PeerError. */
export function connectPeer(opt: ConnectOptions, host: string, advertise: string, on: SessionEvents): Promise<ClientHttp2Session> {
  const me = opt.identity();
  if (!me) return Promise.reject(new PeerError(false, `this host's channel is not up yet: ${host} is not reached`));
  let loop = false;
  const at = advertise.lastIndexOf(':');
  const address = { host: advertise.slice(0, at).replace(/^\[(.*)\]$/, '$1'), port: Number(advertise.slice(at + 1)) };
  return new Promise((resolve, reject) => {
    let socket: TLSSocket | undefined;
    /** The TLS handshake is done (a close from now on, before the owner's SETTINGS, is a refusal). */
    let connected = false;
    let settled = false;
    const session = connect(
      `https://${advertise}`,
      {
        ca: me.ca,
        cert: me.cert,
        key: me.key,
        servername: host,
        checkServerIdentity: (_name: string, cert: PeerCertificate) => {
          const named = peerHost(cert);
          if (named === host) return undefined;
          loop = named === me.host;
          return new Error(`the channel at ${advertise} is ${named ?? 'unnamed'}, not ${host}`);
        },
        settings: { enablePush: false, initialWindowSize: WINDOW },
        // the socket made here, so the connect timeout can end it: a session destroyed before its
        // socket connected (a SYN nobody answers: a partition) emits nothing and stays pending
        createConnection: (_url: URL, o: object) => (socket = tlsConnect({ ...(o as ConnectionOptions), ...address, ALPNProtocols: ['h2'] })),
      },
      // small requests go out at once (Nagle would hold them for the peer's delayed ACK)
      (_s, sock) => sock.setNoDelay(true),
    );
    const t = (opt.clock ?? systemClock).after(opt.connectTimeoutMs, () => {
      const e = new Error(`no channel to ${host} at ${advertise} within ${opt.connectTimeoutMs} ms`);
      socket?.destroy(e);
      session.destroy(e);
    });
    const fail = (e: Error) => {
      t.cancel();
      if (settled) return;
      settled = true;
      opt.health?.error(host, loop ? 'loop' : 'connect', e.message);
      // after the handshake and before the owner's SETTINGS: the owner did not take this host
      reject(new PeerError(loop, e.message, connected));
    };
    session.once('error', fail);
    session.once('close', () => {
      t.cancel();
      on.closed(session);
      opt.health?.closed(host);
      // closed after the handshake, before the owner's SETTINGS: the owner refused this host
      fail(new Error(connected ? `${host} at ${advertise} closed the channel as it opened (it does not take this host)` : `the channel to ${host} closed`));
    });
    // ready once the owner took this host (its SETTINGS) and is the host registered under its name
    let took = false;
    let checked = false;
    const ready = () => {
      if (!took || !checked || settled || session.destroyed) return;
      settled = true;
      t.cancel();
      session.off('error', fail);
      session.on('error', (e) => (opt.log.debug('channel session failed', { peer: host, detail: e.message }), opt.health?.error(host, 'session', e.message)));
      session.unref(); // idle sessions keep no process alive
      on.ready(session);
      opt.health?.opened(host, advertise);
      resolve(session);
    };
    session.once('remoteSettings', () => ((took = true), ready()));
    session.once('connect', () => {
      connected = true;
      session.setLocalWindowSize(SESSION_WINDOW);
      const admit = opt.admit;
      if (!admit) return void ((checked = true), ready());
      void admit.admit(host, socket && peerKey(socket)).then((ok) => {
        if (ok) return void ((checked = true), ready());
        const e = new Error(`the channel at ${advertise} is not ${host} as the registry has it (its certificate's key is not the one ${host} registered)`);
        fail(e);
        session.destroy();
      });
    });
  });
}
