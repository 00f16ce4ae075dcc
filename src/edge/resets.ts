// HTTP/2 stream resets per connection (rapid reset, CVE-2023-44487): every stream a client opens
// reaches an app before its RST_STREAM is seen, so opening and cancelling streams in a loop makes
// the host work at no cost to the client. A reset is a stream that closed with an error code
// (the client's RST_STREAM, or one of ours, which only a failing answer sends). A session may reset `max` streams at once and `max` per
// `windowMs` after that (a token bucket); the next reset ends it with GOAWAY ENHANCE_YOUR_CALM.
// nghttp2 as bundled with node 20.20 (1.61) has a looser bound of its own: about 1000 resets at
// once, then 33 per second, answered with GOAWAY INTERNAL_ERROR.

import { constants, type Http2Stream, type ServerHttp2Session } from 'node:http2';

export interface ResetBound {
  max: number;
  windowMs: number;
}

/** Watches a session's streams; calls `exceeded` once, after the session was told GOAWAY and destroyed. */
export function boundResets(session: ServerHttp2Session, bound: ResetBound, exceeded: (resets: number) => void): (stream: Http2Stream) => void {
  let tokens = bound.max;
  let at = Date.now();
  let resets = 0;
  const onClose = function (this: Http2Stream): void {
    if (this.rstCode === constants.NGHTTP2_NO_ERROR) return;
    resets++;
    const now = Date.now();
    tokens = Math.min(bound.max, tokens + ((now - at) * bound.max) / bound.windowMs) - 1;
    at = now;
    if (tokens >= 0 || session.closed || session.destroyed) return;
    // GOAWAY first (destroy alone would close the socket before the frame leaves), then close
    session.goaway(constants.NGHTTP2_ENHANCE_YOUR_CALM);
    setTimeout(() => session.destroy(), 100).unref();
    exceeded(resets);
  };
  return (stream) => stream.once('close', onClose);
}
