// Where a slug's server runs, as the forwarding edge needs it: the `registry.placements` shape of
// the cluster plan (sync reads from a cache, `fresh` after a "not here"). Until the placement
// cache with LISTEN/NOTIFY is wired, `RegistryLookup` is the channel's own small version: a slug
// is read from the registry on first use and kept (a stale entry costs one "not here" and one
// retry: the owner checks the epoch), and the hosts (advertise address, lease up or down) are
// read every second.

export interface PlacementView {
  serverId: string;
  slug: string;
  host: string;
  epoch: number;
}

export interface HostView {
  name: string;
  advertise: string;
  up: boolean;
}

export interface Placements {
  bySlug(slug: string): PlacementView | undefined;
  byServer(id: string): PlacementView | undefined;
  fresh(slug: string): Promise<PlacementView | undefined>;
  host(name: string): HostView | undefined;
}

export interface LookupSource {
  placementOfSlug(slug: string): Promise<PlacementView | undefined>;
  hosts(): Promise<HostView[]>;
}

const MAX_KEPT = 50_000;

export class RegistryLookup implements Placements {
  private readonly slugs = new Map<string, PlacementView>();
  private readonly servers = new Map<string, PlacementView>();
  private hostsByName = new Map<string, HostView>();
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly src: LookupSource,
    private readonly refreshMs = 1000,
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.refreshMs).unref();
  }

  private async refresh(): Promise<void> {
    try {
      this.hostsByName = new Map((await this.src.hosts()).map((h) => [h.name, h]));
    } catch {
      // the registry is away: the hosts as last seen
    }
  }

  bySlug(slug: string): PlacementView | undefined {
    return this.slugs.get(slug);
  }

  byServer(id: string): PlacementView | undefined {
    return this.servers.get(id);
  }

  async fresh(slug: string): Promise<PlacementView | undefined> {
    const p = await this.src.placementOfSlug(slug);
    const old = this.slugs.get(slug);
    if (old) this.servers.delete(old.serverId);
    if (!p) {
      this.slugs.delete(slug);
      return undefined;
    }
    if (this.slugs.size >= MAX_KEPT) {
      const [first, gone] = this.slugs.entries().next().value!;
      this.slugs.delete(first);
      this.servers.delete(gone.serverId);
    }
    this.slugs.set(slug, p);
    this.servers.set(p.serverId, p);
    return p;
  }

  host(name: string): HostView | undefined {
    return this.hostsByName.get(name);
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
