// Which channel peers the owner's side takes (issue 35 item 2): a certificate of the cluster CA
// is not enough (a name signed once, registered or not, would open root SSH streams); the name
// in it must be a host of the registry whose registered channel key (hosts.channel_key, the
// SPKI SHA-256 its run made and registered at start) is the certificate's own key. Each new
// connection reads the key its host registered now (connections are few and long-lived: one
// session and one raw lane per peer), so a key of a host's earlier run is refused as soon as the
// host registered its next one. The key last read for each host is kept for when the registry
// cannot answer (unreachable, or past the reads a second this host spends on it: a stranger's
// certificates do not turn into registry load): then only that key is taken.

import { systemClock, type Clock, type Timer } from '../clock.js';

export interface RegisteredKeys {
  /** The channel key `host` registered; undefined for a host the registry does not know. */
  channelKey(host: string): Promise<string | undefined>;
}

/** Registry reads a second for new channel connections; past it, the key last read decides. */
const READS_PER_SECOND = 100;
/** How long a connection waits for that read before the key last read decides (a registry that
 *  hangs must not hold the channel: hosts cut off from it still serve each other). */
const READ_WAIT_MS = 300;

export class PeerAdmission {
  private readonly known = new Map<string, string>();
  private window = { at: 0, reads: 0 };

  constructor(
    private readonly keys: RegisteredKeys,
    /** The reads' window and the wait for a read (tests move it). */
    private readonly clock: Clock = systemClock,
  ) {}

  /** Whether a peer naming `host` with certificate key `key` is taken. */
  async admit(host: string, key: string | undefined): Promise<boolean> {
    if (!host || !key) return false;
    const t = this.clock.now();
    if (t - this.window.at >= 1000) this.window = { at: t, reads: 0 };
    if (this.window.reads < READS_PER_SECOND) {
      this.window.reads++;
      const read = this.keys.channelKey(host).then(
        (registered) => {
          if (registered) this.known.set(host, registered);
          else this.known.delete(host);
          return { registered };
        },
        () => undefined, // the registry unreachable: the key last read decides
      );
      let timer: Timer | undefined;
      const late = new Promise<undefined>((resolve) => (timer = this.clock.after(READ_WAIT_MS, () => resolve(undefined))));
      const got = await Promise.race([read, late]);
      timer?.cancel();
      if (got) return got.registered === key;
    }
    return this.known.get(host) === key;
  }
}
