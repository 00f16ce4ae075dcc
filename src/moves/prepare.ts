// The prestage of a running server's move (issue 38), both sides: the source asks the target
// over the channel (PREPARE_PATH, answered only for a peer host) to stage the checkpoint it took
// while the server runs (staging.ts); the target checks it could take the server (not here
// already, room for its ceilings and every stage), materializes that checkpoint into a private
// file, flushed, and answers 200 — nothing else changes there. The source names that checkpoint
// as the adopt's `base` only after a 200: an older target (404) or any failure leaves the move
// as it was, the whole image made at the adopt.

import { AppError } from '../errors.js';
import { shortOf } from '../hosting/index.js';
import { collectAnswer, newRequestId, readBody, type Req } from '../http/index.js';
import type { Logger } from '../log/index.js';
import type { Staging } from './staging.js';
import type { MovesDeps } from './types.js';
import { PREPARE_PATH, PrepareRequest } from './wire.js';

/** How long the source waits for the target's prestage (a whole image from the store) before moving without it. */
export const PREPARE_WAIT_MS = 2 * 60_000;

/** This host's room for a server's ceilings, the staged images (but the server's own) taken off its disk room. */
export function roomShort(d: MovesDeps, staging: Staging | undefined, need: { id: string; memoryBytes: number; diskBytes: number }): string | undefined {
  const c = d.hosting.core.capacity();
  const staged = staging?.bytes(need.id) ?? 0;
  return shortOf({ ...c, ...(c.diskRoomBytes !== undefined ? { diskRoomBytes: c.diskRoomBytes - staged } : {}) }, need);
}

/** Reads and checks the source's prepare. */
export async function prepareRequestOf(req: Req): Promise<PrepareRequest> {
  const raw = await readBody(req, 4096);
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    throw AppError.of('invalid_json', 'a prepare request that is not JSON');
  }
  const r = PrepareRequest.safeParse(parsed);
  if (!r.success) throw AppError.of('invalid_request', `a prepare request this host does not read: ${r.error.issues[0]?.message ?? 'invalid'}`);
  return r.data;
}

/** The target's side: the checkpoint staged here, or the refusal. */
export async function prepareHere(d: MovesDeps, log: Logger, staging: Staging, p: PrepareRequest, from: string): Promise<{ staged: string }> {
  const r = d.registry;
  const cps = d.hosting.core.checkpoints;
  if (!r || !cps?.engine.available) throw AppError.of('not_configured', 'this host takes no moved servers (no registry or no checkpoints)');
  if (d.store.servers.getAny(p.server)) throw AppError.of('server_exists', `${r.host} has server ${p.server} already`);
  const short = roomShort(d, staging, { id: p.server, memoryBytes: p.memoryBytes, diskBytes: p.diskBytes });
  if (short) throw AppError.of('move_target_full', `${r.host} ${short}`);
  const m = await cps.engine.get(p.server, p.checkpoint);
  const t0 = Date.now();
  try {
    await staging.prepare(m);
  } catch (e) {
    throw AppError.of('move_failed', `${r.host} could not stage the checkpoint`, { cause: e, retryAfter: 30 });
  }
  log.info('a running server’s checkpoint staged for its move here', { server: p.server, from, checkpoint: p.checkpoint, ms: Date.now() - t0 });
  return { staged: p.checkpoint };
}

/** A move's JSON POST to `path` on host `to` over the channel (the prepare here, the adopt in
 *  source.ts): the target's answer, its body read up to `maxBytes`. */
export function postToTarget(d: MovesDeps, to: string, path: string, body: unknown, maxBytes: number): ReturnType<typeof collectAnswer> {
  const bytes = Buffer.from(JSON.stringify(body));
  const info = { host: 'moves', scheme: 'https' as const, requestId: newRequestId(), ip: '127.0.0.1' };
  return collectAnswer('POST', path, { 'content-type': 'application/json', accept: 'application/json' }, bytes, maxBytes, (req, res) =>
    d.channel!.forwardApi(to, req, res, info, { body: bytes, counted: true }),
  );
}

/** The source's side: resolves once the target staged the checkpoint; throws on any other answer (a 404: an older target). */
export async function askPrepare(d: MovesDeps, to: string, body: PrepareRequest): Promise<void> {
  const c = await postToTarget(d, to, PREPARE_PATH, body, 16 * 1024);
  if (c.status === 200 && (c.json as { staged?: string } | undefined)?.staged === body.checkpoint) return;
  const err = c.json as { error?: string; detail?: string } | undefined;
  throw new Error(`host ${to} did not stage the checkpoint: ${err?.error ?? ''} ${err?.detail ?? `status ${c.status}`}`.trim());
}
