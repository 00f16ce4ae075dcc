// The sender's raw lane: a lane request (edge/lane.ts: a bodiless GET or HEAD read by the edge's
// own HTTP/1.1 reader) for a server of another host goes to the owner as an HTTP/1.1 head on a
// stream of the raw lane's one connection to that peer (sender-rawpool.ts, wire-mux.ts), straight into
// the owner's own lane (owner-raw.ts), with no HTTP/2 stream and no node HTTP object on either
// side. The head carries what the channel always carries (wire.ts: client address, scheme,
// request id, server id, placement epoch, one hop); the client's own x-rootbox-* fields,
// hop-by-hop and spoofable ones never cross. The owner's answer (HTTP/1.1, in the stream's DATA)
// is read by h1's response reader, so where it ends is known, and written to the client as
// HTTP/1.1 by hand, head and a whole short body in one write; the bytes the client takes are
// credited back, so a long answer runs only a window ahead of its client. "Not here" (421 with
// x-rootbox-not-here), "full path" (421 with x-rootbox-full-path, or a stream the owner ended
// REPLAY without a failure: its lane does not take it, e.g. static files; that server is then
// sent by the full path for a while) and every failure before the first byte reached the client
// hand the request back to the edge (replay): node's server answers it by the full path
// (sender-front.ts, HTTP/2), which asks the registry, retries once and makes the error pages. A
// failure the owner's lane met (a wake that failed, an app that does not answer) comes back with
// the stream's end and is answered here as the page it makes, without sending the request again.
// A failure after the first byte cuts the client's connection; a client that leaves cancels its
// stream, and the owner stops that answer.

import type { Duplex } from 'node:stream';
import { ResponseReader, passedFields, responseHead, wholeAnswer, type HttpDate, type ReaderEvents, type ResponseHead } from '../h1/index.js';
import type { LaneExchange, LaneOutcome, LaneRequest, RequestInfo } from '../http/index.js';
import type { PlacementToRoute } from './lookup.js';
import type { RawStream, RawUser, StreamEnd } from './sender-stream.js';
import type { RawPool } from './sender-rawpool.js';
import { H, NOT_HERE, PREFIX } from './wire.js';

const CRLF = '\r\n';

/** The request head for the owner: the client's fields (hop-by-hop, spoofable, ours and its request id dropped), then the channel's. */
export function rawHead(r: LaneRequest, info: RequestInfo, p: PlacementToRoute): string {
  return (
    `${r.method} ${r.target} HTTP/1.1${CRLF}host: ${r.host}${CRLF}${passedFields(r.raw, ours)}` +
    `${H.site}: ${info.host}${CRLF}${H.ip}: ${info.ip}${CRLF}${H.scheme}: ${info.scheme}${CRLF}${H.rid}: ${info.requestId}${CRLF}` +
    `${H.server}: ${p.serverId}${CRLF}${H.epoch}: ${p.epoch}${CRLF}${H.hops}: 1${CRLF}` +
    (info.alias !== undefined ? `${H.alias}: ${info.alias}${CRLF}` : '') +
    CRLF
  );
}

/** The client's fields in the channel's names, and its request id (the channel sends the edge's). */
const ours = (lower: string) => lower.startsWith(PREFIX) || lower === H.rid;

/** Forwards a lane request over the peer's raw pool; false when the pool cannot take it now (nothing done). */
export function rawForward(
  pool: RawPool,
  date: HttpDate,
  r: LaneRequest,
  sock: Duplex,
  info: RequestInfo & { slug: string },
  p: PlacementToRoute,
  done: (o: LaneOutcome) => void,
  /** The owner said "not here" (told before the replay: the full path then asks the registry first). */
  notHere?: () => void,
): LaneExchange | false {
  if (pool.declined(info.slug)) return false;
  const ex: RawExchange = new RawExchange(pool, date, r, sock, info.slug, info, (o) => {
    if (ex.turnedAway && notHere) notHere();
    done(o);
  });
  return pool.acquire(ex, (s) => ex.attach(s, rawHead(r, info, p))) ? ex : false;
}

class RawExchange implements RawUser, ReaderEvents, LaneExchange {
  /** The owner answered "not here" (its placement moved), as against "full path" or a failure. */
  turnedAway = false;
  private stream: RawStream | undefined;
  private readonly reader: ResponseReader;
  private over = false;
  private status = 0;
  private headText: string | undefined;
  private chunked = false;
  private wrote = false;
  private notHere = false;
  /** Inside onData: body bytes are kept so an answer that ends in the same read goes out in one write. */
  private reading = false;
  private staged: Buffer[] | undefined;
  /** Answer bytes the client's connection has not taken yet: credited to the owner on its drain. */
  private owed = 0;

  constructor(
    private readonly pool: RawPool,
    private readonly date: HttpDate,
    private readonly r: LaneRequest,
    private readonly sock: Duplex,
    private readonly slug: string,
    private readonly info: RequestInfo,
    private readonly done: (o: LaneOutcome) => void,
  ) {
    this.reader = new ResponseReader(this, r.method === 'HEAD');
  }

  attach(s: RawStream | undefined, head: string): void {
    if (!s) return this.finish({ kind: 'replay' }); // no connection: the full path opens the session and answers
    if (this.over) return s.cancel();
    this.stream = s;
    s.head(head);
  }

  onData(chunk: Buffer): void {
    this.reading = true;
    try {
      this.reader.feed(chunk);
      this.reading = false;
      if (this.staged && !this.over) this.unstage();
    } catch {
      this.reading = false;
      this.staged = undefined;
      this.fail(); // an answer that cannot be read: the connection is dropped
    }
  }

  head(h: ResponseHead): void {
    if (this.over) return;
    if (h.status === NOT_HERE) {
      const marked = (name: string) => h.headers.some((v, i) => i % 2 === 0 && v.toLowerCase() === name);
      if (marked(H.fullPath)) this.pool.decline(this.slug);
      if (marked(H.notHere)) this.turnedAway = true;
      if (marked(H.fullPath) || marked(H.notHere)) return void (this.notHere = true);
    }
    this.status = h.status;
    const a = responseHead(h.status, h.headers, {
      requestId: h.requestId ? undefined : this.info.requestId,
      date: this.date,
      bodiless: this.r.method === 'HEAD' || h.status === 204 || h.status === 304,
      close: this.r.close,
    });
    this.headText = a.text;
    this.chunked = a.chunked;
  }

  data(chunk: Buffer): void {
    if (this.over || this.notHere || chunk.length === 0) return;
    if (this.reading && !this.wrote) return void (this.staged ??= []).push(chunk); // a view of the read buffer: used before this read returns
    this.send(chunk);
  }

  private send(chunk: Buffer): void {
    let out: Buffer = Buffer.from(chunk); // a view of the pool's shared read buffer: the socket may queue it
    if (this.chunked) out = Buffer.concat([Buffer.from(`${chunk.length.toString(16)}${CRLF}`, 'latin1'), chunk, Buffer.from(CRLF, 'latin1')]);
    if (this.headText !== undefined) out = Buffer.concat([Buffer.from(this.headText, 'latin1'), out]);
    this.headText = undefined;
    this.wrote = true;
    // the owner sends more of this answer as the client takes it (its window: wire-mux.ts)
    if (this.sock.write(out) && this.owed === 0) return this.stream?.consumed(chunk.length);
    if (this.owed === 0) this.sock.once('drain', this.drained);
    this.owed += chunk.length;
  }

  private readonly drained = (): void => {
    const n = this.owed;
    this.owed = 0;
    this.stream?.consumed(n);
  };

  private unstage(): void {
    const parts = this.staged!;
    this.staged = undefined;
    for (const p of parts) this.send(p);
  }

  end(): void {
    if (this.over) return;
    this.let(true);
    if (this.notHere) return this.finish({ kind: 'replay' });
    const parts = this.staged ?? [];
    this.staged = undefined;
    if (!this.wrote) {
      // the whole answer came in this read: head, body and framing in one write
      const out = wholeAnswer(this.headText!, this.chunked, parts);
      this.headText = undefined;
      this.wrote = true;
      this.sock.write(out);
    } else {
      for (const p of parts) this.send(p);
      if (this.chunked) this.sock.write(`0${CRLF}${CRLF}`, 'latin1');
    }
    this.finish({ kind: 'answered', status: this.status, reusable: !this.r.close });
  }

  /** Leaves the stream: quietly after an answer that ended cleanly (the owner's END follows), else the owner is told to stop. */
  private let(clean: boolean): void {
    const s = this.stream;
    if (!s) return;
    this.stream = undefined;
    if (this.owed > 0) this.sock.off('drain', this.drained);
    this.owed = 0;
    if (clean) s.user = undefined;
    else s.cancel();
  }

  /** The owner ended the stream, or the connection went. */
  onEnd(how: StreamEnd): void {
    this.stream = undefined;
    if (this.over) return;
    if (how.kind === 'answered') {
      try {
        return this.reader.eof(); // ends an answer delimited by its end, else throws
      } catch {
        return this.fail();
      }
    }
    if (how.kind === 'replay' && !this.wrote) {
      if (!how.failure) this.pool.decline(this.slug); // the owner's lane did not take it: the full path, for a while
      return this.finish(how.failure ? { kind: 'replay', failure: how.failure } : { kind: 'replay' });
    }
    this.fail();
  }

  private fail(): void {
    if (this.over) return;
    this.let(false);
    if (this.wrote) {
      this.sock.destroy(); // cut: the client sees a truncated answer
      return this.finish({ kind: 'cut', status: this.status });
    }
    this.finish({ kind: 'replay' });
  }

  clientGone(): void {
    if (this.over) return;
    this.let(false); // mid-answer: the rest would be read by the next client's exchange
    this.finish({ kind: 'cut', status: this.status || undefined });
  }

  private finish(o: LaneOutcome): void {
    if (this.over) return;
    this.over = true;
    this.done(o);
  }
}
