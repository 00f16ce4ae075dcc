// The target's side of a move (issue 38 item 1): the source asks over the channel (ADOPT_PATH,
// answered only for a peer host, never for a client), and this host
//   1. checks it has room for the server's ceilings (409 move_target_full otherwise);
//   2. writes the server record pending (invisible, removed after a crash) with the runtime's
//      reservation, and makes the server from the checkpoint the source named (every chunk
//      verified on the way, its files moved to this host's uid range, as a fork does);
//   3. takes the placement from the epoch the source read (compare-and-set: one more then) with
//      the slug's claim, while the source's run that asked still holds its name (a source that
//      restarted meanwhile kept the server) — a registry that moved on, or cannot be reached,
//      undoes 2 and refuses;
//   4. opens the server's meter at the instant the source charged it up to (a recovery: now), then
//      commits the record, records the server's SSH key under this host, keeps the checkpoint
//      records and routes its own domains, exposes the container ports again on ports of its own, and lets the server
//      sleep if it slept on the source; then answers (the source deletes its copy on that).
// Nothing the shared store holds is removed here, whatever fails: the checkpoints stay the server's.

import { connect } from 'node:net';
import { AppError } from '../errors.js';
import { shortOf } from '../hosting/index.js';
import { readBody, type Req } from '../http/index.js';
import type { Logger } from '../log/index.js';
import type { ServerRecord } from '../store/index.js';
import { noteTo } from './note.js';
import type { MovesDeps } from './types.js';
import { ADOPT_MAX_BYTES, AdoptRequest, type AdoptAnswer } from './wire.js';

/** How long a running server's app may take to listen again on the target before the source is answered. */
const APP_WAIT_MS = 15_000;

/** Resolves once something accepts on port 80 of the server, or after `ms` (an app that listens elsewhere). */
async function appUp(d: MovesDeps, id: string, ms: number): Promise<boolean> {
  const ip = d.runtime.get(id)?.ip;
  if (!ip) return false;
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect({ host: ip, port: 80 });
      const done = (v: boolean) => (s.destroy(), resolve(v));
      s.setTimeout(500, () => done(false));
      s.once('connect', () => done(true));
      s.once('error', () => done(false));
    });
    if (ok) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

/** Reads and checks the source's request. */
export async function adoptRequestOf(req: Req): Promise<AdoptRequest> {
  const raw = await readBody(req, ADOPT_MAX_BYTES);
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    throw AppError.of('invalid_json', 'a move request that is not JSON');
  }
  const r = AdoptRequest.safeParse(parsed);
  if (!r.success) throw AppError.of('invalid_request', `a move request this host does not read: ${r.error.issues[0]?.message ?? 'invalid'}`);
  return r.data;
}

/** Makes the server the source sent on this host, placed here; its answer tells the source to delete its copy. */
export async function adopt(d: MovesDeps, log: Logger, a: AdoptRequest, from: string): Promise<AdoptAnswer> {
  const r = d.registry;
  const core = d.hosting.core;
  const cps = core.checkpoints;
  if (!r || !cps?.engine.available) throw AppError.of('not_configured', 'this host takes no moved servers (no registry or no checkpoints)');
  const s = a.server;
  if (d.store.servers.getAny(s.id)) throw AppError.of('server_exists', `${r.host} has server ${s.id} already`);
  const short = shortOf(core.capacity(), s);
  if (short) throw AppError.of('move_target_full', `${r.host} ${short}`);
  const account = await core.accounts.book.byId(s.accountId);
  if (!account) throw AppError.of('move_failed', `${r.host} does not find the account ${s.accountId} in the registry`);
  const m = await cps.engine.get(s.id, a.checkpoint);
  const servers = core.servers;
  const record: ServerRecord = { ...s, pending: servers.pending.mark('create') };
  const fromDisk = { fill: (path: string) => cps.engine.materialize(m, path), image: m.settings.image || undefined, uidBase: m.uidBase };
  const spec = { id: s.id, slug: s.slug, memoryBytes: s.memoryBytes, diskBytes: s.diskBytes, pendingUntil: record.pending!.until };
  const inserted = d.store.atomically(() => {
    if (!d.store.servers.insert(record)) return false;
    d.runtime.reserve?.({ ...spec, fromDisk });
    return true;
  });
  if (!inserted) throw AppError.of('server_exists', `${r.host} has server ${s.id}'s subdomain ${s.slug} in use already`);
  servers.pending.begin(s.id);
  log.info('taking a server moved here', { server: s.id, slug: s.slug, from, checkpoint: a.checkpoint, running: a.running });
  let epoch: number;
  try {
    await d.runtime.create({ ...spec, net: servers.netOf(account), fromDisk });
    // the compare-and-set: from the epoch the source read, or nothing (the source keeps serving)
    epoch = await r.names.moveHere(s.id, s.slug, d.cfg.publicIp, a.epoch, a.run);
  } catch (e) {
    servers.pending.end(s.id);
    await servers.abandon(s.id);
    log.warn('a moved server was not taken; the source keeps it', { server: s.id, from, err: e });
    throw e instanceof AppError ? e : AppError.of('move_failed', `${r.host} could not make the server from its checkpoint`, { cause: e });
  }
  // metered here from where the source stopped (before the commit: no pass sees it without)
  d.billing?.takeOver(s.id, a.meteredTo);
  d.store.commitCreate(s.id);
  servers.pending.end(s.id);
  // from here on the server is this host's: what follows is best effort, logged, never undone
  for (const c of a.checkpoints) await d.store.checkpoints.add(c);
  core.domains.takeOver(a.domains, s.slug);
  await r.shared
    .recordKey({ serverId: s.id, publicKey: s.sshPublicKey, fingerprint: s.keyFingerprint })
    .catch((err) => log.warn('the moved server’s SSH key is recorded at the next start', { server: s.id, err }));
  for (const port of a.exposed)
    await core.exposures.expose(account, s.id, port).catch((err) => log.warn('a moved server’s port was not exposed again', { server: s.id, port, err }));
  if (a.note) await noteTo(d, s.id, a.note).catch((err) => log.warn('a recovered server’s owner was not told what was lost', { server: s.id, err }));
  if (!a.running) await d.runtime.stop(s.id).catch((err) => log.warn('a moved server that slept is left running', { server: s.id, err }));
  // a running one's app answers before requests are handed over (none is told "app down" while it starts)
  else if (m.settings.runSh) await appUp(d, s.id, APP_WAIT_MS);
  d.proxy.forget(s.id);
  // this host's owner check reads the placement cache: caught up before the source hands requests over
  await r.placements.sync().catch(() => {});
  log.info('server moved here', { server: s.id, slug: s.slug, from, epoch });
  return { epoch, exposed_ports: core.exposures.list(s.id), state: d.presence.state(s.id) ?? d.runtime.get(s.id)?.state ?? 'failed' };
}
