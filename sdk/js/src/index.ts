// rootbox: the TypeScript client of the rootbox hosting API. `new Rootbox({ baseUrl, apiKey? })`
// makes a client; `create()` a server (and, without a key, an anonymous account whose key the
// client keeps); a Server runs commands, moves files, gives its URL, exposes ports, restarts and
// deletes. Every failure the API answers is a RootboxError with its stable code.

import { Transport } from './http.js';
import { Server } from './server.js';
import type { Created, Credits, RechargeInfo, RechargeResult, RotatedKey, ServerInfo, UsagePage } from './types.js';
import { fromWire, toWire } from './wire.js';

export { PaymentRequiredError, RootboxError } from './errors.js';
export { Process, type SpawnOptions } from './process.js';
export { Domains, Files, Server, type ExecOptions } from './server.js';
export type * from './types.js';
export { FIELDS, LEFT_OUT_FIELDS, OPERATIONS, QUERY, UNTYPED } from './wire.js';

export interface RootboxOptions {
  /** The API's base URL, e.g. https://api.example.com (default: $ROOTBOX_BASE_URL). */
  baseUrl?: string;
  /** The account's api_key (default: $ROOTBOX_API_KEY); without one, create() makes an anonymous account. */
  apiKey?: string;
  /** PEM of a CA to trust beside the system's, for a host with its own local CA. */
  ca?: string | Buffer;
  /** How many times a call the API answered 429 (or 503 on GET, PUT, DELETE) with Retry-After is retried (default 2). */
  maxRetries?: number;
  /** The longest Retry-After, in seconds, the client waits itself (default 30); longer ones are thrown. */
  maxRetryWait?: number;
}

export interface CreateOptions {
  /** The wanted subdomain slug (a-z, 0-9, -; 3 to 32 characters). */
  slug?: string;
  /** Wanted slugs in order of preference. */
  subdomains?: string[];
  /** Keep the server awake at all times (needs a verified phone). */
  neverSleep?: boolean;
}

export class Rootbox {
  private readonly t: Transport;
  readonly servers: { list(): Promise<Server[]>; get(id: string): Promise<Server> };

  constructor(o: RootboxOptions = {}) {
    const baseUrl = o.baseUrl ?? process.env.ROOTBOX_BASE_URL;
    if (!baseUrl) throw new TypeError('baseUrl is required (or set ROOTBOX_BASE_URL)');
    this.t = new Transport({
      baseUrl,
      apiKey: o.apiKey ?? (process.env.ROOTBOX_API_KEY || undefined),
      ca: o.ca,
      maxRetries: o.maxRetries,
      maxRetryWait: o.maxRetryWait,
    });
    this.servers = {
      list: async () => {
        const { servers } = await this.t.json<{ servers: unknown[] }>('GET', 'servers');
        return servers.map((s) => this.wrap(fromWire<ServerInfo>(s)));
      },
      get: async (id: string) => this.wrap(fromWire<ServerInfo>(await this.t.json('GET', `servers/${encodeURIComponent(id)}`))),
    };
  }

  /** The account's api_key: the one given, or the one an anonymous create() answered. */
  get apiKey(): string | undefined {
    return this.t.apiKey;
  }

  private wrap(info: ServerInfo | Created): Server {
    return new Server(this.t, info.id, info);
  }

  /** Creates a server. Without an api_key this makes an anonymous account, whose key the client keeps. */
  async create(o: CreateOptions = {}): Promise<Server> {
    const subdomains = o.subdomains ?? (o.slug ? [o.slug] : undefined);
    const body = toWire('CreateRequest', { subdomains, neverSleep: o.neverSleep });
    const created = fromWire<Created>(await this.t.json('POST', 'create', { json: body }));
    if (created.apiKey) this.t.apiKey = created.apiKey;
    return this.wrap(created);
  }

  /** A handle on a server by id, without a request (its url() needs refresh() first). */
  server(id: string): Server {
    return new Server(this.t, id);
  }

  async credits(): Promise<Credits> {
    return fromWire(await this.t.json('GET', 'credits'));
  }
  /** The usage ledger, newest first, a page at a time (`cursor`: the previous page's nextCursor). */
  async usage(o: { limit?: number; cursor?: string } = {}): Promise<UsagePage> {
    return fromWire(await this.t.json('GET', 'usage', { query: { limit: o.limit, cursor: o.cursor } }));
  }
  /** Replaces the api_key (the old one stops working); the client uses the new one. */
  async rotateKey(): Promise<RotatedKey> {
    const k = fromWire<RotatedKey>(await this.t.json('POST', 'account/rotate-key'));
    this.t.apiKey = k.apiKey;
    return k;
  }
  /** How to add credit (and the credits, with a key). */
  async rechargeInfo(): Promise<RechargeInfo> {
    return fromWire(await this.t.json('GET', 'account/recharge'));
  }
  /** Adds credit, paid with x402: without `payment` the API answers 402 with its terms
   *  (PaymentRequiredError.accepts); `payment` is the signed X-PAYMENT payload for them. */
  async recharge(usd: number, o: { payment?: string } = {}): Promise<RechargeResult> {
    const headers: Record<string, string> = o.payment ? { 'x-payment': o.payment } : {};
    return fromWire(await this.t.json('POST', 'account/recharge', { json: toWire('RechargeRequest', { usd }), headers }));
  }
  async feedback(message: string, contact?: string): Promise<void> {
    await this.t.json('POST', 'feedback', { json: toWire('FeedbackRequest', { message, contact }), anonymous: true });
  }
  /** What this host offers (prices, grants, where things are). */
  async info(): Promise<Record<string, unknown>> {
    return this.t.json('GET', '', { anonymous: true });
  }
  async health(): Promise<boolean> {
    await this.t.json('GET', 'healthz', { anonymous: true });
    return true;
  }
  /** The API's OpenAPI 3.1 document. */
  async openapi(): Promise<Record<string, unknown>> {
    return this.t.json('GET', 'openapi.json', { anonymous: true });
  }

  /** Closes the kept-alive connections (a process with nothing else to do then exits at once). */
  close(): void {
    this.t.close();
  }
}

export default Rootbox;
