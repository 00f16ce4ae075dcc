// A lean JSON-RPC client over one URL for the calls on a paid request's path (self-settlement):
// one POST per call or batch through src/net's leanPost (kept-alive node:http, no WHATWG Response,
// no client machinery), the answer parsed directly. RpcUnreachable marks answers that never came
// (connection failed, timeout, HTTP error status, an answer that is not JSON-RPC); RpcError is the
// node's own error answer (a revert, a refused transaction), with its code, message and data.

import { leanPost } from '../net/index.js';

/** An answer that never came: the RPC is down, slow, or cut the connection. */
export class RpcUnreachable extends Error {
  constructor(what: string, cause: unknown) {
    const c = cause as { shortMessage?: string; message?: string; cause?: { message?: string } };
    const why = c.shortMessage ?? (c.cause?.message ? `${c.message} (${c.cause.message})` : c.message);
    super(`rpc ${what}: ${why}`.slice(0, 300));
    this.name = 'RpcUnreachable';
  }
}

/** The node answered with a JSON-RPC error. */
export class RpcError extends Error {
  constructor(
    readonly method: string,
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message.slice(0, 300));
    this.name = 'RpcError';
  }
}

interface Answer {
  id?: unknown;
  result?: unknown;
  error?: { code?: number; message?: string; data?: unknown };
}

const HEADERS = { 'content-type': 'application/json', accept: 'application/json' };

/** One call's outcome inside a batch: its result, or the error it would have thrown. */
export type Settled<T = unknown> = { ok: true; result: T } | { ok: false; error: RpcError };

export class JsonRpc {
  private readonly url: URL;
  private id = 0;

  constructor(
    url: string,
    private readonly timeoutMs: number,
  ) {
    this.url = new URL(url);
  }

  private async post(what: string, body: string): Promise<unknown> {
    let r: { status: number; data: Buffer };
    try {
      r = await leanPost(this.url, body, HEADERS, this.timeoutMs);
    } catch (e) {
      throw new RpcUnreachable(what, e);
    }
    if (r.status < 200 || r.status > 299) throw new RpcUnreachable(what, new Error(`HTTP ${r.status}`));
    try {
      return JSON.parse(r.data.toString('utf8'));
    } catch {
      throw new RpcUnreachable(what, new Error('the answer is not JSON'));
    }
  }

  private static settle(method: string, a: Answer | undefined): Settled {
    if (a && typeof a === 'object' && 'result' in a) return { ok: true, result: a.result };
    if (a?.error && typeof a.error === 'object')
      return { ok: false, error: new RpcError(method, Number(a.error.code ?? 0), String(a.error.message ?? 'error'), a.error.data) };
    throw new RpcUnreachable(method, new Error('the answer is not JSON-RPC'));
  }

  /** One call; its error answer is thrown as RpcError. */
  async call<T>(method: string, params: readonly unknown[]): Promise<T> {
    const a = (await this.post(method, JSON.stringify({ jsonrpc: '2.0', id: ++this.id, method, params }))) as Answer;
    const s = JsonRpc.settle(method, a);
    if (!s.ok) throw s.error;
    return s.result as T;
  }

  /** Several calls in one request; each answer matched by id, in the order asked. */
  async batch(calls: readonly { method: string; params: readonly unknown[] }[]): Promise<Settled[]> {
    const first = this.id + 1;
    const body = JSON.stringify(calls.map((c) => ({ jsonrpc: '2.0', id: ++this.id, method: c.method, params: c.params })));
    const what = calls.map((c) => c.method).join('+');
    const answers = await this.post(what, body);
    if (!Array.isArray(answers)) throw new RpcUnreachable(what, new Error('the answer to a batch is not an array'));
    const byId = new Map<unknown, Answer>();
    for (const a of answers as Answer[]) if (a && typeof a === 'object') byId.set(a.id, a);
    return calls.map((c, i) => JsonRpc.settle(c.method, byId.get(first + i)));
  }
}
