// HTTP-01 responses: token → key authorization while an order is being validated. The edge's
// plain HTTP listener asks `answer(path)` for every /.well-known/acme-challenge/<token> request
// (before Host routing and the HTTPS redirect) and serves the key authorization as text/plain.
// In cluster mode the CA may reach any host behind the shared name, so a token is also written to
// the registry before the CA is told to validate, and a token this host does not hold is looked up
// there (a promise: the edge answers when it settles; an unknown token goes on to the site).

const PREFIX = '/.well-known/acme-challenge/';

/** Where the cluster's hosts share their tokens (registry mode). */
export interface SharedChallenges {
  putChallenge(token: string, keyAuthorization: string): Promise<void>;
  dropChallenge(token: string): Promise<void>;
  challenge(token: string): Promise<string | undefined>;
}

export class Http01Responder {
  private readonly tokens = new Map<string, string>();

  constructor(private readonly shared?: SharedChallenges) {}

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

  /** The body for a request path: a string when this host holds the token, a promise when
   *  another host may (cluster mode), undefined when it is not a challenge path. */
  answer(path: string | undefined): string | Promise<string | undefined> | undefined {
    if (!path?.startsWith(PREFIX)) return undefined;
    const token = path.slice(PREFIX.length).split('?')[0];
    if (!/^[A-Za-z0-9_-]{1,256}$/.test(token)) return undefined;
    const here = this.tokens.get(token);
    if (here !== undefined || !this.shared) return here;
    return this.shared.challenge(token).catch(() => undefined);
  }
}
