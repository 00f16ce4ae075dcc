// Which channel peers the owner's side takes (issue 35 item 2): a certificate of the cluster CA
// is not enough (a name signed once, registered or not, would open root SSH streams); the name
// in it must be a host of the registry whose registered channel key (hosts.channel_key, the
// SPKI SHA-256 its run made and registered at start) is the certificate's own key. The key last
// read for each host is kept in memory (a connection with it is taken at once, also while the
// registry is unreachable); any other is checked by one registry read, within a budget per
// second for the whole host (a stranger's certificates do not turn into registry load).

export interface RegisteredKeys {
  /** The channel key `host` registered; undefined for a host the registry does not know. */
  channelKey(host: string): Promise<string | undefined>;
}

/** Registry reads a second for certificates whose key is not the one last read for their name. */
const READS_PER_SECOND = 50;

export class PeerAdmission {
  private readonly known = new Map<string, string>();
  private window = { at: 0, reads: 0 };

  constructor(
    private readonly keys: RegisteredKeys,
    private readonly now: () => number = Date.now,
  ) {}

  /** Whether `key` is the key last read for `host` (no registry read). */
  holds(host: string, key: string | undefined): boolean {
    return key !== undefined && this.known.get(host) === key;
  }

  /** Whether a peer naming `host` with certificate key `key` is taken. */
  async admit(host: string, key: string | undefined): Promise<boolean> {
    if (!host || !key) return false;
    if (this.holds(host, key)) return true;
    const t = this.now();
    if (t - this.window.at >= 1000) this.window = { at: t, reads: 0 };
    if (this.window.reads >= READS_PER_SECOND) return false;
    this.window.reads++;
    let registered: string | undefined;
    try {
      registered = await this.keys.channelKey(host);
    } catch {
      return false; // the registry unreachable: only the key last read is taken
    }
    if (registered) this.known.set(host, registered);
    else this.known.delete(host);
    return registered === key;
  }
}
