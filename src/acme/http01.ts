// HTTP-01 responses: token → key authorization while an order is being validated. The edge's
// plain HTTP listener asks `answer(path)` for every /.well-known/acme-challenge/<token> request
// (before Host routing and the HTTPS redirect) and serves the key authorization as text/plain.
// In cluster mode the CA may reach any host behind the shared name, so a token is also written to
// the registry before the CA is told to validate; every host keeps the registry's tokens in memory
// (`known`: the placement cache follows them), and one it does not know yet (written a moment ago,
// its notification not in) is looked up in the registry (a promise: the edge answers when it
// settles; an unknown token goes on to the site) — within a budget of reads per source and for
// the host (`misses`), so a stranger spraying random tokens costs bounded reads while the CA's
// requests are answered from memory. No negative cache: a stranger's random tokens never repeat,
// and an "unknown" kept for a token could hide it once its order writes it.

import { MissBudget } from '../misses.js';

const PREFIX = '/.well-known/acme-challenge/';

/** Where the cluster's hosts share their tokens (registry mode). */
export interface SharedChallenges {
  putChallenge(token: string, keyAuthorization: string): Promise<void>;
  dropChallenge(token: string): Promise<void>;
  challenge(token: string): Promise<string | undefined>;
}

export class Http01Responder {
  private readonly tokens = new Map<string, string>();
  /** Registry reads for tokens this host does not hold (cluster mode). */
  readonly misses = new MissBudget();

  constructor(
    private readonly shared?: SharedChallenges,
    /** Registry mode: the tokens every host's orders wrote, as this host knows them now. */
    private readonly known?: { get(token: string): string | undefined },
  ) {}

  /** Holds a token; in cluster mode resolves once every host can answer it. */
  async set(token: string, keyAuthorization: string): Promise<void> {
    this.tokens.set(token, keyAuthorization);
    await this.shared?.putChallenge(token, keyAuthorization);
  }

  async delete(token: string): Promise<void> {
    this.tokens.delete(token);
    await this.shared?.dropChallenge(token).catch(() => undefined); // it expires anyway
  }

  get size(): number {
    return this.tokens.size;
  }

  /** The body for a request path from `ip`: a string when this host holds the token, a promise
   *  when another host may (cluster mode, within the budget of `ip`), undefined when it is not a
   *  challenge path or the budget is spent. */
  answer(path: string | undefined, ip: string): string | Promise<string | undefined> | undefined {
    if (!path?.startsWith(PREFIX)) return undefined;
    const token = path.slice(PREFIX.length).split('?')[0];
    if (!/^[A-Za-z0-9_-]{1,256}$/.test(token)) return undefined;
    const here = this.tokens.get(token) ?? this.known?.get(token);
    if (here !== undefined || !this.shared || !this.misses.allow(token, ip)) return here;
    return this.shared.challenge(token).catch(() => undefined);
  }
}
