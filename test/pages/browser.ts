// A real browser for the page tests: Debian's headless Chromium, launched as documented (fresh
// profile in a temporary directory, no network services of its own), for screenshots and the
// DOM a person would see (--screenshot, --dump-dom), and — for pages with a script — driven over
// the DevTools protocol (a page is opened, typed into and read back; every URL it requested is
// recorded). *.localhost is mapped to 127.0.0.1, where test daemons listen. Also a small PNG
// decoder (zlib only) to tell a real screenshot from a blank one.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inflateSync } from 'node:zlib';
import WebSocket from 'ws';

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--host-resolver-rules=MAP *.localhost 127.0.0.1, MAP localhost 127.0.0.1',
];

/** A fresh profile directory; Chromium's own temporary files (its singleton socket) go inside it too. */
function profileDir(): { dir: string; env: NodeJS.ProcessEnv } {
  const dir = mkdtempSync(join(tmpdir(), 'rbx-chromium-'));
  mkdirSync(join(dir, 'tmp'));
  return { dir, env: { ...process.env, TMPDIR: join(dir, 'tmp') } };
}

/** Runs Chromium once with a fresh profile; resolves with its stdout. Kills its whole process group on timeout. */
function chromium(args: string[], timeoutMs = 60_000): Promise<string> {
  const { dir: profile, env } = profileDir();
  return new Promise<string>((resolve, reject) => {
    const child = spawn('chromium', [...FLAGS, `--user-data-dir=${join(profile, 'data')}`, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      env,
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => killGroup(child), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      rmSync(profile, { recursive: true, force: true });
      if (code === 0) resolve(out);
      else reject(new Error(`chromium ${args.at(-1)} exited ${code}: ${err.slice(-800)}`));
    });
  });
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): void {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    /* gone */
  }
}

/** A screenshot of `url` at 1200×900 (PNG bytes), written to `file`. The compositor runs every
 *  stage before the capture (a busy machine otherwise gets a half-painted page now and then). */
export async function screenshot(url: string, file: string): Promise<Buffer> {
  await chromium([
    `--screenshot=${file}`,
    '--window-size=1200,900',
    '--hide-scrollbars',
    '--run-all-compositor-stages-before-draw',
    '--virtual-time-budget=1000',
    url,
  ]);
  return readFileSync(file);
}

/** The DOM after load, serialized. */
export const dumpDom = (url: string): Promise<string> => chromium(['--dump-dom', url]);

/** What a person reads: the text of a serialized DOM without tags, scripts and styles. */
export function visibleText(dom: string): string {
  return dom
    .replace(/<(script|style)[^>]*>[\s\S]*?<\/\1>/gi, ' ')
    .replace(/<\/?(a|b|code|em|i|span|strong)\b[^>]*>/gi, '')
    .replace(/<[^>]+>/g, ' ')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&amp;/g, '&')
    .replace(/\s+/g, ' ')
    .trim();
}

export interface Png {
  width: number;
  height: number;
  /** Distinct RGB colours (counted up to 100 000). */
  colours: number;
  /** Share of pixels that differ from the top-left one. */
  inked: number;
}

/** Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes). */
export function decodePng(buf: Buffer): Png {
  if (buf.subarray(0, 8).toString('latin1') !== '\x89PNG\r\n\x1a\n') throw new Error('not a PNG');
  let at = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Buffer[] = [];
  while (at < buf.length) {
    const len = buf.readUInt32BE(at);
    const type = buf.subarray(at + 4, at + 8).toString('latin1');
    const data = buf.subarray(at + 8, at + 8 + len);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      const [depth, colourType, , , interlace] = data.subarray(8, 13);
      if (depth !== 8 || interlace !== 0 || (colourType !== 2 && colourType !== 6))
        throw new Error(`unsupported PNG: depth ${depth}, colour type ${colourType}, interlace ${interlace}`);
      channels = colourType === 6 ? 4 : 3;
    } else if (type === 'IDAT') idat.push(data);
    else if (type === 'IEND') break;
    at += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const cur = Buffer.alloc(stride);
  const prev = Buffer.alloc(stride);
  const seen = new Set<number>();
  let first = -1;
  let inked = 0;
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? cur[x - channels] : 0;
      const b = prev[x];
      const c = x >= channels ? prev[x - channels] : 0;
      let v = line[x];
      if (filter === 1) v += a;
      else if (filter === 2) v += b;
      else if (filter === 3) v += (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a);
        const pb = Math.abs(p - b);
        const pc = Math.abs(p - c);
        v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      cur[x] = v & 0xff;
    }
    for (let x = 0; x < width; x++) {
      const rgb = (cur[x * channels] << 16) | (cur[x * channels + 1] << 8) | cur[x * channels + 2];
      if (first < 0) first = rgb;
      if (rgb !== first) inked++;
      if (seen.size < 100_000) seen.add(rgb);
    }
    cur.copy(prev);
  }
  return { width, height, colours: seen.size, inked: inked / (width * height) };
}

/** One page in a headless Chromium driven over the DevTools protocol. */
export interface Tab {
  /** Loads `url` and waits for its load event. */
  open(url: string): Promise<void>;
  /** Evaluates an expression in the page (awaiting a promise) and returns its value. */
  eval<T = unknown>(expression: string): Promise<T>;
  /** A PNG of what the page shows now. */
  screenshot(): Promise<Buffer>;
  /** Every URL the page requested so far. */
  readonly requested: string[];
  close(): Promise<void>;
}

export async function openTab(): Promise<Tab> {
  const { dir: profile, env } = profileDir();
  const child = spawn(
    'chromium',
    [...FLAGS, `--user-data-dir=${join(profile, 'data')}`, '--remote-debugging-port=0', '--window-size=1200,900', 'about:blank'],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: true,
      env,
    },
  );
  const closed = new Promise<void>((r) => child.once('close', () => r()));
  const cleanup = async () => {
    killGroup(child, 'SIGTERM');
    const t = setTimeout(() => killGroup(child), 3000);
    await closed;
    clearTimeout(t);
    rmSync(profile, { recursive: true, force: true });
  };
  try {
    const browserWs = await new Promise<string>((resolve, reject) => {
      let err = '';
      const t = setTimeout(() => reject(new Error(`chromium did not open DevTools: ${err.slice(-500)}`)), 30_000);
      child.stderr!.on('data', (d) => {
        err += d;
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
        if (m) {
          clearTimeout(t);
          resolve(m[1]);
        }
      });
      child.once('close', () => reject(new Error(`chromium exited: ${err.slice(-500)}`)));
    });
    const port = new URL(browserWs).port;
    const list = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { type: string; webSocketDebuggerUrl: string }[];
    const page = list.find((t) => t.type === 'page');
    if (!page) throw new Error('no page target');
    const ws = new WebSocket(page.webSocketDebuggerUrl);
    await new Promise((r, j) => (ws.once('open', r), ws.once('error', j)));
    let seq = 0;
    const pending = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
    const listeners: ((method: string, params: any) => void)[] = [];
    const requested: string[] = [];
    ws.on('message', (m) => {
      const msg = JSON.parse(String(m));
      if (msg.id !== undefined) {
        const p = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.error) p?.reject(new Error(msg.error.message));
        else p?.resolve(msg.result);
      } else {
        if (msg.method === 'Network.requestWillBeSent') requested.push(msg.params.request.url);
        for (const l of listeners) l(msg.method, msg.params);
      }
    });
    const send = (method: string, params: object = {}) =>
      new Promise<any>((resolve, reject) => {
        const id = ++seq;
        pending.set(id, { resolve, reject });
        ws.send(JSON.stringify({ id, method, params }));
      });
    await send('Page.enable');
    await send('Network.enable');
    await send('Runtime.enable');
    return {
      requested,
      async open(url) {
        const loaded = new Promise<void>((r) => listeners.push((m) => m === 'Page.loadEventFired' && r()));
        await send('Page.navigate', { url });
        await loaded;
      },
      async eval<T>(expression: string) {
        const r = await send('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
        if (r.exceptionDetails) throw new Error(`in the page: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`);
        return r.result.value as T;
      },
      async screenshot() {
        return Buffer.from((await send('Page.captureScreenshot', { format: 'png' })).data, 'base64');
      },
      async close() {
        ws.close();
        await cleanup();
      },
    };
  } catch (e) {
    await cleanup();
    throw e;
  }
}
