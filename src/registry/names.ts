// Names and placement in the registry: a slug belongs to one server across every host (a unique
// key claimed before the server is made), and a committed server has one placement row naming the
// host that runs it, with an epoch that grows whenever the placement changes (fencing: a host
// never starts a server placed elsewhere or at a newer epoch). A claim whose server never
// committed (a crash mid-create) is released by its host's reconcile.

import type { RegistryPool } from './pool.js';

export interface Placement {
  serverId: string;
  host: string;
  epoch: number;
  accountId: string;
  slug: string;
  publicIp: string;
}

export class RegistryNames {
  constructor(
    private readonly pool: RegistryPool,
    private readonly host: string,
  ) {}

  /** Claims `slug` for `serverId` on this host; false when any host holds it already. */
  async claim(slug: string, serverId: string): Promise<boolean> {
    const r = await this.pool.query('INSERT INTO slugs (slug, server_id, host) VALUES ($1, $2, $3) ON CONFLICT (slug) DO NOTHING', [slug, serverId, this.host]);
    return r.rowCount === 1;
  }

  /** Gives a slug back (the server is gone or was never made); only the claim of that server. */
  async release(slug: string, serverId: string): Promise<void> {
    await this.pool.query('DELETE FROM slugs WHERE slug = $1 AND server_id = $2 AND host = $3', [slug, serverId, this.host]);
  }

  /** Records where a committed server runs (epoch 1, or one more than a placement it replaces). */
  async place(p: Omit<Placement, 'epoch' | 'host'>): Promise<Placement> {
    const r = await this.pool.query<{ epoch: string }>(
      `INSERT INTO placements (server_id, host, epoch, account_id, slug, public_ip) VALUES ($1, $2, 1, $3, $4, $5)
       ON CONFLICT (server_id) DO UPDATE SET host = $2, epoch = placements.epoch + 1, public_ip = $5, placed_at = now()
       RETURNING epoch`,
      [p.serverId, this.host, p.accountId, p.slug, p.publicIp],
    );
    return { ...p, host: this.host, epoch: Number(r.rows[0].epoch) };
  }

  async placement(serverId: string): Promise<Placement | undefined> {
    const r = await this.pool.query<{ server_id: string; host: string; epoch: string; account_id: string; slug: string; public_ip: string }>(
      'SELECT * FROM placements WHERE server_id = $1',
      [serverId],
    );
    const x = r.rows[0];
    return x && { serverId: x.server_id, host: x.host, epoch: Number(x.epoch), accountId: x.account_id, slug: x.slug, publicIp: x.public_ip };
  }

  /** What the wake fence reads (fence.ts): the server's host and epoch (one read by primary key,
   *  as every start makes it), else `deleted` when its placement's tombstone is left (a second
   *  read, only for a server without a placement), else undefined (the registry knows neither). */
  async fenceOf(serverId: string): Promise<{ host: string; epoch: number } | 'deleted' | undefined> {
    const p = await this.placement(serverId);
    if (p) return { host: p.host, epoch: p.epoch };
    const t = await this.pool.query(`SELECT 1 FROM placement_tombstones WHERE kind = 'p' AND key = $1`, [serverId]);
    return t.rowCount === 1 ? 'deleted' : undefined;
  }

  /** Removes a deleted server's placement and slug in one transaction. */
  async remove(serverId: string): Promise<void> {
    await this.pool.tx(async (c) => {
      await c.query('DELETE FROM placements WHERE server_id = $1 AND host = $2', [serverId, this.host]);
      await c.query('DELETE FROM slugs WHERE server_id = $1 AND host = $2', [serverId, this.host]);
    });
  }

  /** Claims of this host whose server is not among `keep` (reconcile after a crash): released. */
  async releaseOrphans(keep: ReadonlySet<string>): Promise<string[]> {
    const r = await this.pool.query<{ slug: string; server_id: string }>(
      'SELECT s.slug, s.server_id FROM slugs s LEFT JOIN placements p ON p.server_id = s.server_id WHERE s.host = $1 AND p.server_id IS NULL',
      [this.host],
    );
    const gone = r.rows.filter((x) => !keep.has(x.server_id));
    for (const x of gone) await this.release(x.slug, x.server_id);
    return gone.map((x) => x.slug);
  }

  /** Servers placed on this host, by id → epoch (what this host may start). */
  async placedHere(): Promise<Map<string, number>> {
    const r = await this.pool.query<{ server_id: string; epoch: string }>('SELECT server_id, epoch FROM placements WHERE host = $1', [this.host]);
    return new Map(r.rows.map((x) => [x.server_id, Number(x.epoch)]));
  }

  /**
   * At start: the registry's view of this host made to match its store. Placements and claims of
   * this host whose server it no longer has (a create cut off after its placement, a delete cut
   * off before its removal) are removed; servers it has without a placement (made before the
   * host joined the cluster) are claimed and placed; servers placed on another host are left
   * there (`elsewhere`: never re-placed here); servers whose placement was deleted (a tombstone:
   * deleted while this host was down or cut off, wherever it ran then) are not placed again
   * (`deleted`: the host finishes their delete). `servers`: the committed servers of this host.
   */
  async reconcile(
    servers: readonly { id: string; slug: string; accountId: string }[],
    publicIp: string,
  ): Promise<{ removed: string[]; released: string[]; placed: string[]; conflicts: string[]; elsewhere: string[]; deleted: string[] }> {
    const keep = new Set(servers.map((x) => x.id));
    const here = await this.placedHere();
    const removed = [...here.keys()].filter((id) => !keep.has(id));
    for (const id of removed) await this.remove(id);
    const released = await this.releaseOrphans(keep);
    const placed: string[] = [];
    const conflicts: string[] = [];
    const elsewhere: string[] = [];
    const deleted: string[] = [];
    for (const x of servers) {
      if (here.has(x.id)) continue;
      const seen = await this.fenceOf(x.id);
      // placed on another host (a newer epoch there): never taken back from it
      if (seen && seen !== 'deleted') {
        elsewhere.push(x.id);
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
    return { removed, released, placed, conflicts, elsewhere, deleted };
  }
}
