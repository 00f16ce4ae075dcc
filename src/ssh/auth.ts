// Public-key authentication: the key a client proves it holds identifies the server it opens.
// User `root` only; the signature over the session id is verified against the stored public key;
// every other method (password, keyboard-interactive, hostbased) is refused, as is an unknown key
// or a bad signature. The connection counts a login that never succeeded as one failure for its
// address (so a client offering several agent keys is not punished once per key). An address over
// its failure budget still logs in with a valid key (strangers behind the same NAT must not lock
// its users out); only its other attempts end the connection at once: another method or a bad
// signature. A key no server of this host has may name a server of another host (cluster mode:
// the registry's shared keys, which every host keeps in memory: `elsewhere`): the same proof is
// checked against that key, and the outcome names the server id for the caller to reach on its
// owner. A key known nowhere is unknown without asking the registry; only to cover a key recorded
// a moment ago (its notification not in yet) does a miss cost one catch-up read, within a budget
// per source and for the host (`misses`), so a stranger's fresh keys cost bounded reads.

import { timingSafeEqual } from 'node:crypto';
import ssh2 from 'ssh2';
import type { AuthContext } from 'ssh2';
import type { Logger } from '../log/index.js';
import type { MissBudget } from '../misses.js';
import type { ServerRecord } from '../store/index.js';
import { fingerprintOfBlob, publicKeyBlob } from './keys.js';
import type { AuthLimiter } from './ratelimit.js';

export interface ServerLookup {
  byKeyFingerprint(fp: string): ServerRecord | undefined;
}

type KeyOf = { serverId: string; publicKey: string };

/** Servers of other hosts whose public key has this fingerprint (the registry's shared keys). */
export interface KeysElsewhere {
  /** From memory (the placement cache's copy of the registry's keys). */
  known(fingerprint: string): readonly KeyOf[];
  /** The same after one catch-up read of the registry. */
  fresh(fingerprint: string): Promise<readonly KeyOf[]>;
}

export interface AuthDeps {
  servers: ServerLookup;
  limiter: AuthLimiter;
  log: Logger;
  elsewhere?: KeysElsewhere;
  /** The reads of the registry a key known nowhere may cause (with `elsewhere`). */
  misses?: MissBudget;
}

export type AuthOutcome =
  | { ok: true; server: ServerRecord }
  /** The key is that of a server another host runs (its id). */
  | { ok: true; remote: string }
  /** `why` is set for a real failed attempt (not the initial `none` probe); `hangUp` when the address is over its failure budget and the attempt cannot succeed. */
  | { ok: false; hangUp: boolean; why?: string }
  | { ok: 'query' };

const ONLY_PUBLICKEY: ['publickey'] = ['publickey'];

function sameBytes(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Decides one authentication request. Rejects and answers key queries itself; on success it
 * returns the server and leaves ctx.accept() to the caller. Over the address's failure budget,
 * an attempt that cannot be a valid key login is reported so the connection can hang up; a key
 * that is only offered (agents offer several) or unknown does not hang up, so the right key
 * offered later still gets in.
 */
export function authenticate(ctx: AuthContext, ip: string, deps: AuthDeps): AuthOutcome | Promise<AuthOutcome> {
  const blocked = deps.limiter.blocked(ip);
  const refuse = (why: string, counts: boolean, hangUp = false): AuthOutcome => {
    if (counts) deps.log.debug('ssh auth refused', { ip, method: ctx.method, user: ctx.username, why, blocked });
    ctx.reject(ONLY_PUBLICKEY);
    return { ok: false, hangUp: blocked && hangUp, why: counts ? why : undefined };
  };
  if (ctx.method === 'none') return refuse('none', false);
  if (ctx.method !== 'publickey') return refuse(`method ${ctx.method} is not offered`, true, true);
  if (ctx.username !== 'root') return refuse('user is not root', true, true);

  const fp = fingerprintOfBlob(ctx.key.data);
  const server = deps.servers.byKeyFingerprint(fp);
  if (server) return prove(ctx, server.sshPublicKey, refuse, { ok: true, server });
  const elsewhere = deps.elsewhere;
  if (!elsewhere) return refuse('unknown key', true);
  const data = ctx.key.data;
  const match = (keys: readonly KeyOf[]) =>
    keys.find((x) => {
      const blob = publicKeyBlob(x.publicKey);
      return blob !== null && sameBytes(blob, data);
    });
  const known = match(elsewhere.known(fp));
  if (known) return prove(ctx, known.publicKey, refuse, { ok: true, remote: known.serverId });
  if (deps.misses && !deps.misses.allow(fp, ip)) return refuse('unknown key', true);
  return elsewhere.fresh(fp).then(
    (keys) => {
      const k = match(keys);
      if (!k) deps.misses?.unknown(fp);
      return k ? prove(ctx, k.publicKey, refuse, { ok: true, remote: k.serverId }) : refuse('unknown key', true);
    },
    (e: unknown) => {
      deps.log.warn('ssh key lookup in the registry failed', { ip, detail: (e as Error).message });
      return refuse('the registry could not be asked', false);
    },
  );
}

/** The key query or the signature over the session id, checked against `publicKey` (an OpenSSH line). */
function prove(ctx: AuthContext, publicKey: string, refuse: (why: string, counts: boolean, hangUp?: boolean) => AuthOutcome, ok: AuthOutcome): AuthOutcome {
  const stored = publicKeyBlob(publicKey);
  // The index maps the fingerprint to a server; the stored key must also be byte-identical.
  if (!stored || ctx.method !== 'publickey' || !sameBytes(stored, ctx.key.data)) return refuse('unknown key', true);

  // Without a signature the client only asks whether this key would do (RFC 4252 §7).
  if (!ctx.signature || !ctx.blob) {
    ctx.accept();
    return { ok: 'query' };
  }
  const key = ssh2.utils.parseKey(publicKey);
  if (key instanceof Error || Array.isArray(key)) return refuse('stored key does not parse', true, true);
  let valid = false;
  try {
    valid = key.verify(ctx.blob, ctx.signature, ctx.hashAlgo as never) === true;
  } catch {
    valid = false;
  }
  if (!valid) return refuse('bad signature', true, true);
  // The caller accepts (ctx.accept() emits 'ready' synchronously, so it records the server first).
  return ok;
}
