// Names and placement in the registry: a slug belongs to one server across every host (a unique
// key claimed before the server is made), and a committed server has one placement row naming the
// host that runs it, with an epoch that grows whenever the placement changes (fencing: a host
// never starts a server placed elsewhere or at a newer epoch). A claim whose server never
// committed (a crash mid-create) is released by its host's reconcile. Every placement write is a
// compare-and-set: a new placement is inserted, an existing one changes only from the epoch the
// writer read (`place(p, expected)`), and every start of a server bumps its epoch from the one
// this host last wrote (`startAt`), so a host that missed a change never acts on it. Placements
// and claims record the instance that wrote them (identity.ts): a host's reconcile removes only
// its own instance's, never another's under the same name. Every write also checks, in its own
// statement, that this run still holds the host's name in the hosts table (`hosts.run`): a run
// that lost its name (another instance took it over) writes nothing, even before it notices.

import { AppError } from '../errors.js';
import type { RegistryPool } from './pool.js';

/** Who writes: this host's instance, and whether its run holds the host's name now. `run`: this
 *  run's id as the hosts table records the holder of the name (identity.ts); every write is made
 *  only while that row names it. Without one (a tool or a test alone) writes are not checked. */
export interface NameHolder {
  readonly instance: string;
  readonly held: boolean;
  readonly run?: string;
}

/** A write's condition: this run holds the host's name (`h`: the host's parameter, `r`: the run's; a null run passes). */
export const HOLDS = (h: string, r: string) => `(${r}::text IS NULL OR EXISTS (SELECT 1 FROM hosts WHERE name = ${h} AND run = ${r}))`;

/** A placement: the registry's record that a server runs on a host, at an epoch (a row of
 *  `placements`). The one placement type of the code: the cache holds it with its version
 *  (placements.ts `CachedPlacement`); the channel and hosting read the parts they need
 *  (channel `PlacementToRoute`, hosting `PlacementToForward` and `PlacementToShow`). */
export interface Placement {
  serverId: string;
  host: string;
  epoch: number;
  accountId: string;
  slug: string;
  publicIp: string;
}

/** What the registry says of a server this host is about to start: `started` (its epoch bumped
 *  from the one this host wrote), else why not (the placement as it is, `deleted`, or undefined:
 *  the registry knows neither placement nor tombstone). */
export type StartAnswer = { started: number } | { host: string; epoch: number; lost: boolean; mine: boolean } | 'deleted' | undefined;

export class RegistryNames {
  /** The epoch this host last wrote for each server it placed or started (the compare of its next write). */
  private readonly epochs = new Map<string, number>();

  /** `holder`: this host's instance (a daemon's Registry gives its identity; alone: one of the host's name). */
  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
    private readonly holder: NameHolder = { instance: `ins_${host}`, held: true },
  ) {}

  /** This host's name. */
  get hostName(): string {
    return this.host;
  }

  /** Refuses to write under this host's name while this run does not hold it. */
  private held(): void {
    if (!this.holder.held)
      throw AppError.of('registry_unavailable', 'this host does not hold its name in the cluster registry: shared records are not changed', { retryAfter: 5 });
  }

  /** This run's id for the write's condition (HOLDS). */
  private get run(): string | null {
    return this.holder.run ?? null;
  }

  /** After a write that changed nothing: refused when the hosts table no longer names this run as the holder of the name. */
  private async stillHeld(): Promise<void> {
    if (this.holder.run === undefined) return;
    const r = await this.pool.query('SELECT 1 FROM hosts WHERE name = $1 AND run = $2', [this.host, this.holder.run]);
    if (r.rowCount !== 1)
      throw AppError.of('registry_unavailable', 'another run holds this host name in the cluster registry now: shared records are not changed', {
        retryAfter: 5,
      });
  }

  /** The epoch this host last wrote for `serverId` (its own view, beside the placement cache's). */
  epochOf(serverId: string): number | undefined {
    return this.epochs.get(serverId);
  }

  /** Claims `slug` for `serverId` on this host; false when any host holds it already. */
  async claim(slug: string, serverId: string): Promise<boolean> {
    this.held();
    const r = await this.pool.query(
      `INSERT INTO slugs (slug, server_id, host, instance) SELECT $1::text, $2::text, $3::text, $4::text WHERE ${HOLDS('$3', '$5')} ON CONFLICT (slug) DO NOTHING`,
      [slug, serverId, this.host, this.holder.instance, this.run],
    );
    if (r.rowCount !== 1) await this.stillHeld();
    return r.rowCount === 1;
  }

  /** Gives a slug back (the server is gone or was never made); only the claim of that server. */
  async release(slug: string, serverId: string): Promise<void> {
    await this.pool.query(`DELETE FROM slugs WHERE slug = $1 AND server_id = $2 AND host = $3 AND ${HOLDS('$3', '$4')}`, [slug, serverId, this.host, this.run]);
  }

  /** Records where a committed server runs: a new placement at epoch 1; an existing one is
   *  taken (moved here, or placed again) only from the epoch `expected` the caller read, one
   *  more then. Throws 409 placement_conflict when the registry has it at another epoch (or
   *  the caller expected none). */
  async place(p: Omit<Placement, 'epoch' | 'host'>, expected?: number): Promise<Placement> {
    this.held();
    const r = await this.pool.query<{ epoch: string }>(
      `INSERT INTO placements (server_id, host, epoch, account_id, slug, public_ip, instance)
         SELECT $1::text, $2::text, 1, $3::text, $4::text, $5::text, $6::text WHERE ${HOLDS('$2', '$8')}
       ON CONFLICT (server_id) DO UPDATE SET host = $2, epoch = placements.epoch + 1, public_ip = $5, instance = $6, lost_at = NULL, placed_at = now()
         WHERE placements.epoch = $7::bigint AND ${HOLDS('$2', '$8')}
       RETURNING epoch`,
      [p.serverId, this.host, p.accountId, p.slug, p.publicIp, this.holder.instance, expected ?? null, this.run],
    );
    if (r.rowCount !== 1) {
      await this.stillHeld();
      const now = await this.placement(p.serverId);
      throw AppError.of(
        'placement_conflict',
        `server ${p.serverId} is placed on ${now?.host ?? 'no host'} at epoch ${now?.epoch ?? '-'}${expected === undefined ? '' : `, not ${expected}`}: this host did not take it`,
      );
    }
    const epoch = Number(r.rows[0].epoch);
    this.epochs.set(p.serverId, epoch);
    return { ...p, host: this.host, epoch };
  }

  /** A move (src/moves): the placement another host wrote is taken by this host from the epoch
   *  `expected` the source read (compare-and-set, one more then), the server's slug claim with
   *  it, in one transaction. Throws 409 placement_conflict when the registry has it at another
   *  epoch, lost or deleted (nothing written). `fromRun`: the run of the placement's host that
   *  asked (a move's source); the placement is taken only while that run still holds the host's
   *  name — a source that restarted meanwhile kept its copy and serves it (its next start reads
   *  the placement after its new run is written, which waits for this transaction). */
  async moveHere(serverId: string, slug: string, publicIp: string, expected: number, fromRun?: string): Promise<number> {
    this.held();
    const epoch = await this.pool.tx(async (c) => {
      if (fromRun !== undefined) {
        const h = await c.query<{ run: string | null }>(
          'SELECT h.run FROM hosts h JOIN placements p ON p.host = h.name WHERE p.server_id = $1 FOR SHARE OF h',
          [serverId],
        );
        if (h.rows[0]?.run !== fromRun) return undefined;
      }
      const r = await c.query<{ epoch: string }>(
        `UPDATE placements SET host = $2, epoch = epoch + 1, public_ip = $3, instance = $4, lost_at = NULL, placed_at = now()
           WHERE server_id = $1 AND epoch = $5::bigint AND lost_at IS NULL AND ${HOLDS('$2', '$6')}
         RETURNING epoch`,
        [serverId, this.host, publicIp, this.holder.instance, expected, this.run],
      );
      if (r.rowCount !== 1) return undefined;
      await c.query('UPDATE slugs SET host = $3, instance = $4 WHERE slug = $1 AND server_id = $2', [slug, serverId, this.host, this.holder.instance]);
      return Number(r.rows[0].epoch);
    });
    if (epoch === undefined) {
      await this.stillHeld();
      const now = await this.placement(serverId);
      throw AppError.of(
        'placement_conflict',
        `server ${serverId} is placed on ${now?.host ?? 'no host'} at epoch ${now?.epoch ?? '-'}, not ${expected}: this host did not take it`,
      );
    }
    this.epochs.set(serverId, epoch);
    return epoch;
  }

  /** The wake fence's compare-and-set (fence.ts): the server's epoch bumped from the one this
   *  host wrote last, only while it is placed here by this instance and not lost; a server this
   *  host wrote nothing for in this run is taken at the epoch of its placement here. Otherwise
   *  what the registry has instead. */
  async startAt(serverId: string): Promise<StartAnswer> {
    let known = this.epochs.get(serverId);
    if (known === undefined) {
      const p = await this.fenceOf(serverId);
      if (!p || p === 'deleted' || p.host !== this.host || !p.mine || p.lost) return p;
      known = p.epoch;
    }
    const r = await this.pool.query<{ epoch: string }>(
      `UPDATE placements SET epoch = epoch + 1 WHERE server_id = $1 AND host = $2 AND instance = $3 AND lost_at IS NULL AND epoch = $4 AND ${HOLDS('$2', '$5')}
       RETURNING epoch`,
      [serverId, this.host, this.holder.instance, known, this.run],
    );
    if (r.rowCount === 1) {
      const epoch = Number(r.rows[0].epoch);
      this.epochs.set(serverId, epoch);
      return { started: epoch };
    }
    // not bumped (another epoch, another host, or this run no longer holds the name): what is
    // there instead, never `started`, so the fence refuses
    return this.fenceOf(serverId);
  }

  async placement(serverId: string): Promise<Placement | undefined> {
    const r = await this.pool.query<{ server_id: string; host: string; epoch: string; account_id: string; slug: string; public_ip: string }>(
      'SELECT * FROM placements WHERE server_id = $1',
      [serverId],
    );
    const x = r.rows[0];
    return x && { serverId: x.server_id, host: x.host, epoch: Number(x.epoch), accountId: x.account_id, slug: x.slug, publicIp: x.public_ip };
  }

  /** A server's placement as the fence sees it (one read by primary key): its host and epoch,
   *  whether this instance wrote it and whether it is lost; else `deleted` when its placement's
   *  tombstone is left (a second read, only for a server without a placement), else undefined
   *  (the registry knows neither). */
  async fenceOf(serverId: string): Promise<{ host: string; epoch: number; lost: boolean; mine: boolean } | 'deleted' | undefined> {
    const r = await this.pool.query<{ host: string; epoch: string; instance: string | null; lost: boolean }>(
      'SELECT host, epoch, instance, lost_at IS NOT NULL AS lost FROM placements WHERE server_id = $1',
      [serverId],
    );
    const p = r.rows[0];
    if (p) return { host: p.host, epoch: Number(p.epoch), lost: p.lost, mine: p.host === this.host && p.instance === this.holder.instance };
    const t = await this.pool.query(`SELECT 1 FROM changes WHERE kind = 'placement' AND key = $1 AND payload IS NULL`, [serverId]);
    return t.rowCount === 1 ? 'deleted' : undefined;
  }

  /** Removes a deleted server's placement and slug in one transaction. Refused (409
   *  placement_conflict, nothing removed) when the registry places it on another host: a move or
   *  a recovery took it there, so a delete on this host would delete nothing of the one that runs. */
  async remove(serverId: string): Promise<void> {
    this.held();
    await this.pool.tx(async (c) => {
      const other = await c.query<{ host: string }>('SELECT host FROM placements WHERE server_id = $1 AND host <> $2 FOR UPDATE', [serverId, this.host]);
      if (other.rows[0])
        throw AppError.of('placement_conflict', `server ${serverId} is placed on ${other.rows[0].host} now: nothing was removed here; send the request again`);
      const v = [serverId, this.host, this.holder.instance, this.run];
      const p = await c.query(`DELETE FROM placements WHERE server_id = $1 AND host = $2 AND instance = $3 AND ${HOLDS('$2', '$4')}`, v);
      const s = await c.query(`DELETE FROM slugs WHERE server_id = $1 AND host = $2 AND instance = $3 AND ${HOLDS('$2', '$4')}`, v);
      if (p.rowCount === 0 && s.rowCount === 0) await this.stillHeld();
    });
    this.epochs.delete(serverId);
  }

  /** A server that left this host (a move's target took its placement): the epoch this host wrote
   *  for it is no longer the compare of any write of its. Kept, it would be the stale epoch a
   *  later start here compares against — one of a server moved back here whose placement write's
   *  answer was lost (taken without this map learning its epoch): refused by the fence — and the
   *  owner's view (channel ownersView) would place it here at that epoch once the cache has none. */
  forget(serverId: string): void {
    this.epochs.delete(serverId);
  }

  /** Claims of this instance whose server is not among `keep` (reconcile after a crash): released. */
  async releaseOrphans(keep: ReadonlySet<string>): Promise<string[]> {
    this.held();
    const r = await this.pool.query<{ slug: string; server_id: string }>(
      'SELECT s.slug, s.server_id FROM slugs s LEFT JOIN placements p ON p.server_id = s.server_id WHERE s.host = $1 AND s.instance = $2 AND p.server_id IS NULL',
      [this.host, this.holder.instance],
    );
    const gone = r.rows.filter((x) => !keep.has(x.server_id));
    for (const x of gone) await this.release(x.slug, x.server_id);
    return gone.map((x) => x.slug);
  }

  /** Servers this instance placed on this host and not lost, by id → epoch (what it may start). */
  async placedHere(): Promise<Map<string, number>> {
    const r = await this.pool.query<{ server_id: string; epoch: string }>(
      'SELECT server_id, epoch FROM placements WHERE host = $1 AND instance = $2 AND lost_at IS NULL',
      [this.host, this.holder.instance],
    );
    return new Map(r.rows.map((x) => [x.server_id, Number(x.epoch)]));
  }

  /**
   * At start: the registry's view of this host made to match its store. Placements and claims
   * this instance wrote whose server it no longer has (a create cut off after its placement, a
   * delete cut off before its removal) are removed — never another instance's under the same
   * name (a store that lacks a server is no proof it is gone). Servers it has without a
   * placement (made before the host joined the cluster) are claimed and placed; servers placed
   * on another host, or here by another instance, are left there (`elsewhere`: never re-placed
   * here; `moved`: those of them placed on another host, a move or a recovery while this host
   * was away or cut off) — unless that instance was replaced and its placements marked lost: those this store
   * has (a data dir restored from a backup) are placed again for this instance. Servers whose
   * placement was deleted (a tombstone: deleted while this host was down or cut off, wherever it
   * ran then) are not placed again (`deleted`: the host finishes their delete). `servers`: the
   * committed servers of this host; `moving`: servers another host handed over whose record here
   * is still pending (src/moves resolves them by their placement): their placement and claim are
   * left as they are. A placement here at an epoch above 1 whose server this store lacks is not
   * removed but marked lost (`lost`): only a create cut off leaves one at epoch 1 — above, it was
   * started or handed over here, and removing it would tombstone a server whose checkpoints then go.
   */
  async reconcile(
    servers: readonly { id: string; slug: string; accountId: string }[],
    publicIp: string,
    moving: ReadonlySet<string> = new Set(),
  ): Promise<{
    removed: string[];
    lost: string[];
    released: string[];
    placed: string[];
    conflicts: string[];
    elsewhere: string[];
    moved: string[];
    deleted: string[];
  }> {
    this.held();
    const keep = new Set([...servers.map((x) => x.id), ...moving]);
    const here = await this.placedHere();
    for (const [id, epoch] of here) if (keep.has(id) && !moving.has(id) && !this.epochs.has(id)) this.epochs.set(id, epoch);
    const gone = [...here.keys()].filter((id) => !keep.has(id));
    const removed = gone.filter((id) => here.get(id)! <= 1);
    const lost = gone.filter((id) => here.get(id)! > 1);
    for (const id of removed) await this.remove(id);
    for (const id of lost) await this.markLost(id);
    const released = await this.releaseOrphans(keep);
    const placed: string[] = [];
    const conflicts: string[] = [];
    const elsewhere: string[] = [];
    const moved: string[] = [];
    const deleted: string[] = [];
    for (const x of servers) {
      if (here.has(x.id)) continue;
      const seen = await this.fenceOf(x.id);
      // placed here by the instance this one replaced (--replace-host marked it lost) and in this
      // store (a data dir restored from a backup): this instance's again, from the epoch it read
      if (seen && seen !== 'deleted' && seen.host === this.host && seen.lost && !seen.mine) {
        await this.place({ serverId: x.id, accountId: x.accountId, slug: x.slug, publicIp }, seen.epoch);
        await this.pool.query(`UPDATE slugs SET instance = $3 WHERE slug = $1 AND server_id = $2 AND host = $4 AND ${HOLDS('$4', '$5')}`, [
          x.slug,
          x.id,
          this.holder.instance,
          this.host,
          this.run,
        ]);
        placed.push(x.id);
        continue;
      }
      // placed on another host (a newer epoch there): never taken back from it
      if (seen && seen !== 'deleted') {
        elsewhere.push(x.id);
        if (seen.host !== this.host) moved.push(x.id);
        continue;
      }
      // its placement was deleted (the registry keeps the tombstone): never resurrected
      if (seen === 'deleted') {
        deleted.push(x.id);
        continue;
      }
      const mine =
        (await this.claim(x.slug, x.id)) || (await this.pool.query('SELECT 1 FROM slugs WHERE slug = $1 AND server_id = $2', [x.slug, x.id])).rowCount === 1;
      if (!mine) {
        conflicts.push(x.slug);
        continue;
      }
      await this.place({ serverId: x.id, accountId: x.accountId, slug: x.slug, publicIp });
      placed.push(x.id);
    }
    return { removed, lost, released, placed, conflicts, elsewhere, moved, deleted };
  }

  /** Marks this instance's placement of a server this host does not have lost (kept, with its
   *  slug and the checkpoints that name it; the fence starts it nowhere until an operator acts). */
  private async markLost(serverId: string): Promise<void> {
    await this.pool.query(
      `UPDATE placements SET lost_at = now() WHERE server_id = $1 AND host = $2 AND instance = $3 AND lost_at IS NULL AND ${HOLDS('$2', '$4')}`,
      [serverId, this.host, this.holder.instance, this.run],
    );
    this.epochs.delete(serverId);
  }
}
