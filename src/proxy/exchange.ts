// One request forwarded to an app over a pooled connection: the head and body go up (a chunked
// or unsized HTTP/2 body is re-framed as chunked), the answer comes back through h1's
// reader into the client's response, with back-pressure both ways. An answer that arrives whole
// in one read is written after the current batch of events, with the other writes of that batch
// (batch.ts); a longer one streams as it comes. A stale kept-alive connection is retried once for
// a bodiless GET/HEAD. Every way it can end — complete, client gone, app refusing, timing out,
// lying or dying — settles it exactly once, gives the connection back (reused only after a
// clean, complete exchange) and tells its owner (onDone). Egress is counted by the caller on the
// client's connection (egress.ts), not here. A request whose source holds its share of the app's
// connections with as many waiting (pool.ts) gets 429 `too_many_app_requests`, one the pool's
// full queue has no place for (or bumps) 503 `app_busy`; one whose body
// stalls past bodyIdleTimeout gets 408 `body_timeout` (upload.ts), its app connection closed.

import type { Readable } from 'node:stream';
import { AppError } from '../errors.js';
import { sourceKey } from '../slots.js';
import type { Req, RequestInfo, Res } from '../http/index.js';
import type { Logger } from '../log/index.js';
import { ResponseReader, UpstreamProtocolError, requestHead, type ReaderEvents, type ResponseHead } from '../h1/index.js';
import type { Batch } from './batch.js';
import { appWentAway, codeOf, refusal, reportFailure, type ForwardFailure } from './failures.js';
import { sendErrorPage } from './pages.js';
import { Upload } from './upload.js';
import type { Bumped, Conn, Refusal, Upstream, UpstreamPool } from './pool.js';
import { UpstreamTurn } from './turn.js';

export type { ForwardFailure } from './failures.js';

/** What the caller of one exchange asks of it. */
export interface WebOptions {
  serverId: string;
  /** Replaces the request stream when the body was buffered during a wake. */
  body?: Readable;
  onFailure?: (serverId: string, f: ForwardFailure) => void;
  /**
   * The app went away before answering a request that can be sent again (failures.ts
   * appWentAway): called instead of answering the failure; the owner waits for the app and
   * forwards the request again (the exchange is over, onDone follows).
   */
  appAway?: () => void;
  /** Called once when the exchange is over, whichever way it ended. */
  onDone?: () => void;
}

/** What every exchange shares. */
/** What every exchange of one forwarder shares: its log and its write batch. */
export interface ExchangeShared {
  log: Logger;
  batch: Batch;
  /** A request body idle this long ends its request (ms; 0 or absent: never). */
  bodyIdleTimeout?: number;
}

const noop = () => {};

/** Content-Length, Transfer-Encoding and the authority of a request (HTTP/1.1: from the raw list). */
function framing(req: Req): { length?: string; te?: string; host: string } {
  if (req.httpVersionMajor >= 2) {
    const h = req.headers;
    return { length: h['content-length'], te: h['transfer-encoding'] as string | undefined, host: String(h[':authority'] ?? h.host ?? '') };
  }
  // node's parser has refused conflicting lengths and a length beside Transfer-Encoding
  let length: string | undefined;
  let te: string | undefined;
  let host = '';
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i];
    if (n.length === 4) {
      if (!host && n.toLowerCase() === 'host') host = raw[i + 1];
    } else if (n.length === 14) {
      if (n.toLowerCase() === 'content-length') length = raw[i + 1];
    } else if (n.length === 17 && n.toLowerCase() === 'transfer-encoding') te = raw[i + 1];
  }
  return { length, te, host };
}

export class Exchange extends UpstreamTurn implements ReaderEvents, Bumped {
  /** The answer's head and body so far, while all of it came in the read being handled. */
  private staged: { head: ResponseHead; parts: Buffer[] } | undefined;
  private cancelWait = noop;
  private readonly wire: string;
  /** The request body's way up; only for requests that have one. */
  private readonly upload: Upload | undefined;

  constructor(
    protected readonly pool: UpstreamPool,
    private readonly req: Req,
    private readonly res: Res,
    private readonly upstream: Upstream,
    private readonly info: RequestInfo,
    private readonly o: WebOptions,
    private readonly shared: ExchangeShared,
  ) {
    super();
    const { length, te, host } = framing(req);
    const stream = (req as { stream?: { endAfterHeaders?: boolean } }).stream;
    const bodiless = req.method === 'GET' || req.method === 'HEAD';
    const hasBody = length !== undefined ? length !== '0' : te !== undefined || (!bodiless && stream?.endAfterHeaders === false);
    const chunked = hasBody && length === undefined;
    if (hasBody) {
      const body = o.body ?? (req as Readable);
      this.upload = new Upload(
        body,
        chunked,
        () => this.bodyFailed(),
        shared.bodyIdleTimeout ?? 0,
        () => this.bodyStalled(),
      );
    }
    this.wire = requestHead(req.method ?? 'GET', req.url ?? '/', host, req.rawHeaders, info.ip, info.scheme, chunked);
    res.on('close', () => this.clientGone());
  }

  start(): void {
    this.reader = new ResponseReader(this, this.req.method === 'HEAD');
    this.answered = false;
    const cancel = this.pool.acquire(this.upstream, this.retried, sourceKey(this.info.ip), (c) => this.attach(c), this);
    if (typeof cancel === 'string') return this.refused(cancel);
    this.cancelWait = cancel;
  }

  /** Queued, this request lost its place to another source's (pool.ts). */
  bumped(): void {
    this.cancelWait = noop;
    if (!this.settled) this.refused('full');
  }

  /** The pool queued nothing for this request: 429 (its source's share) or 503 (the queue). */
  private refused(why: Refusal): void {
    this.settle(false);
    this.endClient(refusal(why));
  }

  /** The request body brought nothing for bodyIdleTimeout: the app's connection is freed, the client told. */
  private bodyStalled(): void {
    if (this.settled) return;
    this.settle(false);
    const s = Math.round((this.shared.bodyIdleTimeout ?? 0) / 1000);
    this.shared.log.info('request body stalled: request ended', { rid: this.info.requestId, server: this.o.serverId });
    if (this.res.headersSent) return void (this.res as { destroy(): void }).destroy();
    this.endClient(AppError.of('body_timeout', `the request body brought no byte for ${s} s; the request was ended`));
  }

  /**
   * Answers `err` to a request whose body was not (all) read, and ends the client's side of it:
   * an HTTP/1.1 connection is closed after the answer, an HTTP/2 stream reset (NO_ERROR, sent by
   * node once the answer is out), so a stalled body holds neither.
   */
  private endClient(err: AppError): void {
    const { req, res } = this;
    if ((res as { destroyed?: boolean }).destroyed || res.writableEnded) return;
    const h2 = req.httpVersionMajor >= 2;
    if (this.upload && !h2) res.setHeader('connection', 'close');
    try {
      sendErrorPage(req, res, err, this.info.requestId);
    } catch {
      return void (res as { destroy(): void }).destroy();
    }
    const stream = h2 && this.upload ? (req as { stream?: { close(): void; destroyed: boolean } }).stream : undefined;
    if (stream && !stream.destroyed) stream.close();
  }

  private attach(c: Conn): void {
    this.cancelWait = noop;
    if (this.settled) return this.pool.release(c, true);
    this.conn = c;
    c.owner = this;
    this.shared.batch.holdWrites(c.sock);
    c.sock.write(this.wire, 'latin1'); // node decoded the client's header bytes as latin1: the same bytes go up
    this.upload?.attach(c.sock);
  }

  private bodyFailed(): void {
    this.clientGone();
    (this.res as { destroy(): void }).destroy();
  }

  override onDrain(): void {
    this.upload?.drained();
  }

  // --- the answer -----------------------------------------------------------------------------

  onData(chunk: Buffer): void {
    this.answered = true;
    try {
      this.reader.feed(chunk);
      // The answer did not end in this read: stream it from here on.
      if (this.staged) this.unstage();
    } catch (e) {
      this.staged = undefined;
      this.fail(e as Error);
    }
  }

  head(h: ResponseHead): void {
    if (this.settled) return;
    this.staged = { head: h, parts: [] };
  }

  data(chunk: Buffer): void {
    if (this.settled) return;
    // A copy: the chunk is a view of the pool's shared read buffer, and the response may queue it.
    const copy = Buffer.from(chunk);
    if (this.staged) return void this.staged.parts.push(copy);
    if (!(this.res as NodeJS.WritableStream).write(copy)) this.holdApp();
  }

  /** Writes the head (a refusal by node becomes a 502) and whatever body came with it. */
  private unstage(): void {
    const { head, parts } = this.staged!;
    this.staged = undefined;
    this.writeHead(head);
    for (const p of parts) (this.res as NodeJS.WritableStream).write(p);
  }

  private writeHead(h: ResponseHead): void {
    const res = this.res;
    try {
      if (!h.requestId) h.headers.push('x-request-id', this.info.requestId);
      res.writeHead(h.status, h.headers as never);
    } catch (e) {
      // node refused a value we let through: forget every header and answer 502 instead.
      for (const n of res.getHeaderNames()) res.removeHeader(n);
      // node's message quotes the app's header; the 502 names only what kind of refusal it was
      throw new UpstreamProtocolError(`header refused by node (${codeOf(e as Error) ?? 'invalid'})`, { cause: e });
    }
  }

  end(reusable: boolean): void {
    if (this.settled) return;
    this.settle(reusable && (this.upload?.done ?? true));
    const staged = this.staged;
    if (!staged) return void this.res.end();
    // All of the answer came in one read: it is written with the rest of this batch's writes.
    this.staged = undefined;
    this.shared.batch.afterBatch(() => this.finish(staged.head, staged.parts));
  }

  private finish(head: ResponseHead, parts: Buffer[]): void {
    const res = this.res;
    if ((res as { destroyed?: boolean }).destroyed || res.headersSent) return;
    try {
      this.writeHead(head);
    } catch (e) {
      return this.failPage(e as Error);
    }
    try {
      if (parts.length === 0) res.end();
      else res.end(parts.length === 1 ? parts[0] : Buffer.concat(parts));
    } catch {
      (res as { destroy(): void }).destroy();
    }
  }

  // --- failures -------------------------------------------------------------------------------

  protected resendable(): boolean {
    return !this.upload && (this.req.method === 'GET' || this.req.method === 'HEAD');
  }

  private clientGone(): void {
    if (!this.settled) this.settle(false);
  }

  protected fail(err: Error): void {
    if (this.settled) return;
    const away = this.o.appAway;
    if (away && this.resendable() && !this.res.headersSent && appWentAway(err, this.answered)) {
      this.shared.log.debug('app went away: waiting for it', { rid: this.info.requestId, error_code: codeOf(err) });
      away(); // before settle: the owner's new hold on the server is taken before this one ends
      return this.settle(false);
    }
    this.settle(false);
    this.failPage(err);
  }

  /** A 502/504 page when nothing was sent yet, else a cut answer. */
  private failPage(err: Error): void {
    const res = this.res;
    if ((res as { destroyed?: boolean }).destroyed || res.writableEnded) return;
    if (res.headersSent) return void (res as { destroy(): void }).destroy(); // cut: the client sees a truncated answer
    const e = reportFailure(err, this.timedOut, {
      serverId: this.o.serverId,
      requestId: this.info.requestId,
      log: this.shared.log,
      onFailure: this.o.onFailure,
    });
    try {
      sendErrorPage(this.req, res, e, this.info.requestId);
    } catch {
      (res as { destroy(): void }).destroy();
    }
  }

  /** Ends the exchange for good: no more waiting, body pumping or connection. */
  private settle(reusable: boolean): void {
    this.settled = true;
    this.cancelWait();
    this.upload?.detach();
    this.release(reusable);
    this.o.onDone?.();
  }

  protected client(): NodeJS.EventEmitter {
    return this.res;
  }
}
