// POST/DELETE /expose: publishes a container TCP port on a public port from the configured pool,
// within the tier's caps per server and per account (so no tenant can take the whole pool).
// Allocation lives in the store; the listening and piping is done by a PortListener (the
// proxy's TcpExposer). A new exposure is stored pending, its port opened, then committed with a
// synced transaction before the answer: an answered /expose survives a crash, an unanswered one
// is dropped. At start-up every committed exposure of a live server is opened again. In a
// cluster every change is told to the registry (`changed`: the container ports a recovery of the
// server on another host exposes again, registry/settings.ts), which writes it off the answer's
// path (registry/settingswriter.ts: kept and written again until the registry takes it).

import { AppError } from '../errors.js';
import type { Config } from '../config/index.js';
import type { AccountRecord, Store } from '../store/index.js';
import { tierOf, type Tier } from './accounts.js';
import type { ExposedPort } from './servers.js';

export type PortLimits = Config['hosting']['portLimits'];

const RAISE: Record<Tier, string> = {
  anonymous: 'verify a phone or add credit to raise it',
  verified: 'add credit to raise it',
  paid: 'ask the operator to raise it',
};

export interface PortListener {
  open(port: number, serverId: string, containerPort: number): Promise<void>;
  close(port: number): Promise<void>;
}

/** The container ports a server has exposed (committed ones). */
export const exposedOf = (store: Store, serverId: string): number[] =>
  store.exposures
    .byServer(serverId)
    .filter((e) => !e.pending)
    .map((e) => e.containerPort);

export class Exposures {
  private readonly first: number;
  private readonly last: number;

  constructor(
    private readonly store: Store,
    private readonly listener: PortListener,
    pool: string,
    private readonly publicIp: string,
    private readonly limits: PortLimits,
    /** Told after a server's exposed ports changed (never throws; in a cluster it does not wait for the registry). */
    private readonly changed: (serverId: string) => Promise<void> = async () => {},
  ) {
    [this.first, this.last] = pool.split('-').map(Number);
  }

  private view(port: number, containerPort: number): ExposedPort {
    const host = this.publicIp.includes(':') ? `[${this.publicIp}]` : this.publicIp;
    return { public: `${host}:${port}`, container_port: containerPort, protocol: 'tcp' };
  }

  list(serverId: string): ExposedPort[] {
    return this.store.exposures
      .byServer(serverId)
      .filter((e) => !e.pending)
      .map((e) => this.view(e.port, e.containerPort));
  }

  /** Refuses a new exposure beyond the tier's caps. Synchronous with the allocation that follows
   *  it, so concurrent requests cannot both pass the check. */
  private checkLimits(account: AccountRecord, serverId: string, containerPort: number): void {
    const mine = this.store.exposures.byServer(serverId);
    if (mine.some((e) => e.containerPort === containerPort)) return; // already exposed: answered as is
    const tier = tierOf(this.store.accounts.get(account.id) ?? account);
    const lim = this.limits[tier];
    if (mine.length >= lim.perServer) {
      throw AppError.of(
        'port_limit',
        `server ${serverId} already exposes ${mine.length} ports; a server of a ${tier} account may expose at most ${lim.perServer} (${lim.perAccount} per account). Unexpose one (DELETE /expose) or ${RAISE[tier]}.`,
        {
          extra: { limit: lim.perServer, scope: 'server', tier },
        },
      );
    }
    const servers = new Set(this.store.servers.listByAccount(account.id).map((s) => s.id));
    servers.add(serverId);
    const held = this.store.exposures.all().filter((e) => servers.has(e.serverId)).length;
    if (held >= lim.perAccount) {
      throw AppError.of(
        'port_limit',
        `your servers already expose ${held} ports; a ${tier} account may expose at most ${lim.perAccount} in all (${lim.perServer} per server). Unexpose one (DELETE /expose) or ${RAISE[tier]}.`,
        {
          extra: { limit: lim.perAccount, scope: 'account', tier },
        },
      );
    }
  }

  async expose(account: AccountRecord, serverId: string, containerPort: number): Promise<ExposedPort> {
    for (let tries = 0; tries < 5; tries++) {
      this.checkLimits(account, serverId, containerPort);
      const got = this.store.exposures.allocate(serverId, containerPort, this.first, this.last, { pending: true });
      if (!got) throw AppError.of('port_pool_exhausted', 'every public port of this host is in use; try again later');
      const { port } = got.exposure;
      if (!got.created) {
        if (got.exposure.pending)
          throw AppError.of('expose_in_progress', `port ${containerPort} of ${serverId} is being exposed by another request; try again in a moment`);
        return this.view(port, containerPort);
      }
      try {
        await this.listener.open(port, serverId, containerPort);
      } catch {
        // Something else on the host holds this port: keep it marked (so it is skipped) under a
        // placeholder owner and try the next one.
        this.store.atomically(() => {
          this.store.exposures.releaseIf(port, serverId);
          this.store.exposures.allocate('srv_host', port, port, port);
        });
        continue;
      }
      if (this.store.exposures.commit(port, serverId)) {
        await this.changed(serverId);
        return this.view(port, containerPort);
      }
      // the server was deleted meanwhile and its ports released
      await this.listener.close(port);
      throw AppError.of('server_not_found', `you have no server ${serverId}`);
    }
    throw AppError.of('port_pool_exhausted', 'could not bind a public port; try again later');
  }

  async unexpose(serverId: string, containerPort: number): Promise<void> {
    const e = this.store.exposures.byServer(serverId).find((x) => x.containerPort === containerPort && !x.pending);
    if (!e) throw AppError.of('not_exposed', `port ${containerPort} of ${serverId} is not exposed`);
    await this.listener.close(e.port);
    this.store.exposures.release(e.port);
    await this.changed(serverId);
  }

  async releaseServer(serverId: string): Promise<void> {
    for (const e of this.store.exposures.byServer(serverId)) {
      await this.listener.close(e.port);
      this.store.exposures.release(e.port);
    }
  }

  /** Opens every committed exposure of a live server again (daemon start); placeholders, never
   *  answered exposures and those of servers gone or being deleted are dropped. */
  async restore(log: (msg: string, f: Record<string, unknown>) => void): Promise<void> {
    for (const e of this.store.exposures.all()) {
      if (e.serverId === 'srv_host' || e.pending || !this.store.servers.get(e.serverId)) {
        this.store.exposures.release(e.port);
        continue;
      }
      await this.listener
        .open(e.port, e.serverId, e.containerPort)
        .catch((err) => log('could not reopen exposed port', { port: e.port, err: (err as Error).message }));
    }
  }
}
