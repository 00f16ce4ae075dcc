// What a forwarded request carries on the channel besides the client's own head: who the client
// is (address, scheme, request id: trusted only because the channel's peer is a cluster host,
// proven by its certificate), which server the sender meant (id and the placement epoch it saw:
// the owner checks both) and how many hops it made. The client's own x-rootbox-* headers never
// cross: the receiving edge drops them with the hop-by-hop set HTTP/2 forbids.

import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import { connectionTokens, REQUEST_DROP } from '../h1/index.js';

/** The prefix of every header the channel itself carries: dropped from a client's head, never passed to an app. */
export const PREFIX = 'x-rootbox-';

export const H = {
  hops: `${PREFIX}hops`,
  ip: `${PREFIX}client-ip`,
  scheme: `${PREFIX}scheme`,
  rid: 'x-request-id',
  server: `${PREFIX}server`,
  epoch: `${PREFIX}epoch`,
  /** The host name the edge routed by (`<slug>.{domain}`; a server's own domain arrives as it). */
  site: `${PREFIX}site`,
  /** A server's own domain the client asked for (the sender routed it to site): the owner checks it is still the server's. */
  alias: `${PREFIX}alias`,
  /** A WebSocket handshake: the value of the client's Upgrade header. */
  upgrade: `${PREFIX}upgrade`,
  /** The owner's answer is the app's HTTP/1.1 answer, bytes as they go to the client. */
  raw: `${PREFIX}raw`,
  /** A request for the owner's API app (sender-api.ts), not its proxy. */
  api: `${PREFIX}api`,
  /** An API request the sender's own routes counted against the rate limits already (a create sent
   *  on, a part of a server list): the owner does not count it again. Any other is counted there. */
  counted: `${PREFIX}counted`,
  /** The owner's answer when it does not run the server the sender meant. */
  notHere: `${PREFIX}not-here`,
  /** The owner's answer on the raw lane when its lane does not take the request (static files): send it by the full path. */
  fullPath: `${PREFIX}full-path`,
} as const;

/** A forwarded request passes one channel: an owner never forwards again, so a second hop is a loop. */
export const MAX_HOPS = 1;

/** Status of the owner's "not here" answer (Misdirected Request: the sender asks the registry and retries once). */
export const NOT_HERE = 421;

/** The client's head for the channel: pseudo-headers, hop-by-hop, spoofable and our own names dropped. */
export function channelHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const named = connectionTokens(headers.connection);
  const out: OutgoingHttpHeaders = {};
  for (const name in headers) {
    if (name.charCodeAt(0) === 58 /* : */ || REQUEST_DROP.has(name) || name.startsWith(PREFIX) || named.includes(name) || name === 'upgrade') continue;
    out[name] = headers[name];
  }
  return out;
}

/** The owner's answer head for the client: pseudo-headers and our own names dropped. */
export function answerHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const name in headers) if (name.charCodeAt(0) !== 58 && !name.startsWith(PREFIX)) out[name] = headers[name];
  return out;
}

/** Flow-control windows: a stream's and a whole session's (64 KiB defaults throttle large bodies across hosts). */
export const WINDOW = 1 << 20;
export const SESSION_WINDOW = 16 << 20;

/** Drops the channel's own headers from a forwarded request before an app sees it (its parsed
 *  headers and the raw pairs the proxy sends on: both are arrays of the request's own). */
export function dropOwn(req: { headers: IncomingHttpHeaders; rawHeaders: string[] }): void {
  for (const name of Object.keys(req.headers)) if (name.startsWith(PREFIX)) delete req.headers[name];
  const raw = req.rawHeaders;
  for (let i = raw.length - 2; i >= 0; i -= 2) if (raw[i].toLowerCase().startsWith(PREFIX)) raw.splice(i, 2);
}

/** A peer asking, beside each ping, when this host last reached the registry having heard it
 *  (registry/contact.ts `vouchAgo`): answered at once with REGISTRY_AGO, never passed to an app. */
export const CONTACT_ASK = `${PREFIX}contact` as const;
/** The answer: milliseconds, or -1 for "not in this run". */
export const REGISTRY_AGO = `${PREFIX}registry-ago` as const;

/** The stream kind of an SSH connection over the channel (sender-ssh.ts, owner-ssh.ts): not an HTTP request for the proxy. */
export const SSH_KIND = `${PREFIX}kind` as const;
/** The SSH client's port, as the receiving host saw it. */
export const CLIENT_PORT = `${PREFIX}client-port` as const;
