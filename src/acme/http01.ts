// HTTP-01 responses: token → key authorization while an order is being validated. The edge's
// plain HTTP listener asks `answer(path)` for every /.well-known/acme-challenge/<token> request
// (before Host routing and the HTTPS redirect) and serves the key authorization as text/plain.

const PREFIX = '/.well-known/acme-challenge/';

export class Http01Responder {
  private readonly tokens = new Map<string, string>();

  set(token: string, keyAuthorization: string): void {
    this.tokens.set(token, keyAuthorization);
  }

  delete(token: string): void {
    this.tokens.delete(token);
  }

  get size(): number {
    return this.tokens.size;
  }

  /** The body for a request path, or undefined when it is not a challenge this daemon holds. */
  answer(path: string | undefined): string | undefined {
    if (!path?.startsWith(PREFIX)) return undefined;
    const token = path.slice(PREFIX.length).split('?')[0];
    return /^[A-Za-z0-9_-]{1,256}$/.test(token) ? this.tokens.get(token) : undefined;
  }
}
