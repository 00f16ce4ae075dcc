// Shared by the page tests: requests with curl (a real client that names the port in Host, as
// people and agents do; it resolves *.localhost itself), polling, and screenshot checks.

import * as assert from 'uvu/assert';
import { join } from 'node:path';
import { run } from '../helpers/run.js';
import { decodePng, screenshot, type Png } from './browser.js';

export interface Got {
  status: number;
  type: string;
  text: string;
  json: any;
}

/** One request with curl; `accept` defaults to curl's own (`*\/*`). */
export async function curl(url: string, o: { method?: string; accept?: string; key?: string; body?: unknown; cacert?: string } = {}): Promise<Got> {
  const args = ['-s', '-S', '--max-time', '30', '-o', '-', '-w', '\n%{http_code} %{content_type}', '-X', o.method ?? 'GET'];
  if (o.accept) args.push('-H', `accept: ${o.accept}`);
  if (o.key) args.push('-H', `authorization: Bearer ${o.key}`);
  if (o.body !== undefined) args.push('-H', 'content-type: application/json', '--data-binary', JSON.stringify(o.body));
  if (o.cacert) args.push('--cacert', o.cacert);
  const r = await run('curl', [...args, url], { timeoutMs: 40_000 });
  assert.is(r.code, 0, `curl ${url}: ${r.stderr}`);
  const cut = r.stdout.lastIndexOf('\n');
  const tail = r.stdout.slice(cut + 1);
  const [status, type] = [tail.slice(0, tail.indexOf(' ')), tail.slice(tail.indexOf(' ') + 1)];
  const text = r.stdout.slice(0, cut);
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: Number(status), type, text, json };
}

/** Calls `get` until `ok` holds for its value (or throws after `ms`), returning that value. */
export async function until<T>(get: () => T | Promise<T>, ok: (v: T) => boolean, what: string, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await get();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`${what}: still ${JSON.stringify(v)?.slice(0, 300)} after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Takes a 1200×900 screenshot of `url` into `dir/name.png` and checks it shows a page, not a blank. */
export async function shot(dir: string, name: string, url: string): Promise<Png> {
  const png = decodePng(await screenshot(url, join(dir, `${name}.png`)));
  assert.equal([png.width, png.height], [1200, 900], `${name}: screenshot size`);
  assert.ok(png.colours >= 16, `${name}: ${png.colours} colours — a blank or near-blank page`);
  assert.ok(png.inked > 0.03 && png.inked < 0.97, `${name}: ${(png.inked * 100).toFixed(1)} % of the pixels differ from the corner`);
  return png;
}
