// Static serving of /root/www straight from the host view of a server's root filesystem, with no
// wake: index.html, directory redirects, content types, ETag/Last-Modified and 304, single byte
// ranges, HEAD. Path resolution (and every escape attempt) is resolve.ts's job.

import type { Stats } from 'node:fs';
import { AppError } from '../errors.js';
import type { Req, Res } from '../http/index.js';
import { contentType } from './mime.js';
import { sendErrorPage, sendWelcome } from './pages.js';
import { openInside, urlSegments, walk } from './resolve.js';

const WWW = ['root', 'www'];

export interface StaticSite {
  slug: string;
  /** Host path of the server's root filesystem. */
  rootfs: string;
}

const etagOf = (st: Stats) => `"${Math.floor(st.mtimeMs).toString(16)}-${st.size.toString(16)}"`;
const weakEq = (a: string, b: string) => a.replace(/^W\//, '') === b.replace(/^W\//, '');

function notModified(req: Req, etag: string, mtimeMs: number): boolean {
  const inm = req.headers['if-none-match'];
  if (typeof inm === 'string') return inm.trim() === '*' || inm.split(',').some((t) => weakEq(t.trim(), etag));
  const ims = req.headers['if-modified-since'];
  if (typeof ims === 'string') {
    const t = Date.parse(ims);
    return Number.isFinite(t) && Math.floor(mtimeMs / 1000) * 1000 <= t;
  }
  return false;
}

/** One satisfiable byte range, 'full' to send everything, or 'unsatisfiable' (416). */
function rangeOf(req: Req, size: number, etag: string, mtimeMs: number): { start: number; end: number } | 'full' | 'unsatisfiable' {
  const h = req.headers.range;
  if (typeof h !== 'string' || req.method !== 'GET') return 'full';
  const ifRange = req.headers['if-range'];
  if (typeof ifRange === 'string') {
    const fresh = ifRange.startsWith('"') || ifRange.startsWith('W/') ? ifRange === etag : Date.parse(ifRange) >= Math.floor(mtimeMs / 1000) * 1000;
    if (!fresh) return 'full';
  }
  const m = /^bytes=(\d*)-(\d*)$/.exec(h.trim());
  if (!m || (m[1] === '' && m[2] === '')) return 'full'; // multiple or malformed ranges: the whole file is a valid answer
  let start: number;
  let end: number;
  if (m[1] === '') {
    const suffix = Number(m[2]);
    if (suffix === 0) return 'unsatisfiable';
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (start >= size || end < start) return 'unsatisfiable';
  }
  return { start, end };
}

const notFound = (path: string) =>
  AppError.of('not_found', `nothing is published at ${path.slice(0, 200)}`, {
    extra: { hint: 'Static files are served from /root/www on the server.' },
  });

/** `api`: origin of the hosting API, for the links of the pages served here. */
export async function serveStatic(req: Req, res: Res, site: StaticSite, requestId: string, api?: string): Promise<void> {
  res.setHeader('x-request-id', requestId);
  const method = req.method ?? 'GET';
  if (method !== 'GET' && method !== 'HEAD') {
    return sendErrorPage(
      req,
      res,
      AppError.of('method_not_allowed', `${method.slice(0, 20)} is not allowed on static files; use GET or HEAD`, { headers: { allow: 'GET, HEAD' } }),
      requestId,
    );
  }
  let url: ReturnType<typeof urlSegments>;
  try {
    url = urlSegments(req.url ?? '/');
  } catch (e) {
    return sendErrorPage(req, res, e as AppError, requestId);
  }
  const { segments } = url;
  const shown = `/${segments.join('/')}`;
  let found = await walk(site.rootfs, [...WWW, ...segments]);
  if (found?.stat.isDirectory()) {
    if (!url.trailingSlash && segments.length > 0) {
      const q = (req.url ?? '').indexOf('?');
      const location = `/${segments.map(encodeURIComponent).join('/')}/${q >= 0 ? (req.url ?? '').slice(q) : ''}`;
      res.writeHead(301, { location, 'content-length': '0', 'cache-control': 'no-cache' });
      res.end();
      return;
    }
    found = await walk(site.rootfs, [...WWW, ...segments, 'index.html']);
  }
  const opened = found ? await openInside(site.rootfs, found) : undefined;
  if (!opened) {
    if (segments.length === 0) return sendWelcome(req, res, site.slug, api);
    return sendErrorPage(req, res, notFound(shown), requestId, api);
  }
  const { fh, stat } = opened;
  let handedOff = false;
  try {
    const etag = etagOf(stat);
    const headers: Record<string, string> = {
      etag,
      'last-modified': stat.mtime.toUTCString(),
      'cache-control': 'no-cache',
      'accept-ranges': 'bytes',
      'x-content-type-options': 'nosniff',
    };
    if (notModified(req, etag, stat.mtimeMs)) {
      res.writeHead(304, headers);
      res.end();
      return;
    }
    headers['content-type'] = contentType(found!.containerPath);
    const range = rangeOf(req, stat.size, etag, stat.mtimeMs);
    if (range === 'unsatisfiable') {
      res.writeHead(416, { ...headers, 'content-range': `bytes */${stat.size}`, 'content-length': '0' });
      res.end();
      return;
    }
    const { start, end } = range === 'full' ? { start: 0, end: stat.size - 1 } : range;
    const length = Math.max(0, end - start + 1);
    if (range !== 'full') headers['content-range'] = `bytes ${start}-${end}/${stat.size}`;
    headers['content-length'] = String(length);
    res.writeHead(range === 'full' ? 200 : 206, headers);
    if (method === 'HEAD' || length === 0) {
      res.end();
      return;
    }
    const stream = fh.createReadStream({ start, end, highWaterMark: 64 * 1024 });
    handedOff = true;
    stream.on('error', () => (res as { destroy(): void }).destroy());
    res.on('close', () => stream.destroy());
    stream.pipe(res as NodeJS.WritableStream);
  } finally {
    if (!handedOff) await fh.close().catch(() => {});
  }
}
