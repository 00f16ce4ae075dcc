// A mixed create/delete/expose/unexpose/recharge load against a daemon that may be SIGKILLed at
// any moment, and the model of what it acknowledged. An answer 200 is an acknowledged change; a
// refusal (4xx) is no change; a request cut off by the kill (or a 5xx) is unknown: either outcome
// is allowed, but it must be whole. Creates name their subdomain, so a create that committed but
// whose answer was lost in the kill can be told apart from debris.

import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { decodeHeader } from '../../../src/payments/index.js';
import { encode, newPayer, signPayment, type Terms } from '../../payments/fixtures/payer.js';
import { rng } from '../../helpers/rng.js';

/** A small seeded PRNG (mulberry32), so a failing run can be repeated with its seed. */
export const prng = rng;

export interface Answer {
  status: number;
  body: any;
  headers: Record<string, string | string[] | undefined>;
}

/** One HTTP call to the hosting API on the daemon's plain port; status 0 = cut off. */
export function api(port: number, method: string, path: string, o: { key?: string; body?: unknown; headers?: Record<string, string> } = {}): Promise<Answer> {
  return new Promise((resolve) => {
    const data = o.body === undefined ? undefined : JSON.stringify(o.body);
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        agent: false,
        timeout: 90_000,
        headers: {
          host: 'api.localhost',
          ...(o.key ? { authorization: `Bearer ${o.key}` } : {}),
          ...(data ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(data)) } : {}),
          ...o.headers,
        },
      },
      (res) => {
        let s = '';
        res.on('data', (c) => (s += c));
        res.on('error', () => resolve({ status: 0, body: s, headers: {} }));
        res.on('end', () => {
          let body: any = s;
          try {
            body = JSON.parse(s);
          } catch {
            /* not JSON */
          }
          resolve({ status: res.statusCode!, body, headers: res.headers });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => resolve({ status: 0, body: undefined, headers: {} }));
    req.end(data);
  });
}

export type Known = 'live' | 'gone' | 'maybe';

export interface Srv {
  id: string;
  slug: string;
  /** api_key of the owner; undefined for a committed-but-unanswered anonymous create. */
  key?: string;
  state: Known;
  /** A delete of it was cut off by a kill and the server stayed. */
  cutDelete?: boolean;
}

export interface Exp {
  server: string;
  containerPort: number;
  /** Public port (known once acknowledged, or read back for a maybe). */
  port?: number;
  state: Known;
}

export const keyHash = (key: string) => createHash('sha256').update(key).digest('hex');

export class Model {
  readonly servers = new Map<string, Srv>();
  readonly exposures = new Map<string, Exp>();
  /** api_keys the client was given (hash → key). */
  readonly keys = new Map<string, string>();
  /** Accounts of creates that committed but whose answer the kill cut off (key never seen). */
  readonly adopted = new Set<string>();
  /** Creates cut off by a kill: the subdomain they asked for, and the key they were sent with. */
  readonly inflightCreates: { slug: string; key?: string }[] = [];
  rechargeAcked = 0;
  rechargeMaybe = 0;
  counts = { create: 0, delete: 0, expose: 0, unexpose: 0, recharge: 0, cut: 0, refused: 0, ipLimit: 0 };
  /** Refusals by operation, status and error code. */
  readonly refusals: Record<string, number> = {};

  refused(op: string, r: Answer): void {
    this.counts.refused++;
    const k = `${op} ${r.status} ${r.body?.error ?? ''}`;
    this.refusals[k] = (this.refusals[k] ?? 0) + 1;
  }

  live(): Srv[] {
    return [...this.servers.values()].filter((s) => s.state === 'live' && s.key);
  }

  liveExposures(): Exp[] {
    return [...this.exposures.values()].filter((e) => e.state === 'live');
  }
}

export interface LoadOptions {
  port: () => number;
  model: Model;
  rnd: () => number;
  /** The account servers are created under when not anonymous. */
  mainKey: string;
  /** The account recharges go to. */
  payKey: string;
  /** Servers the per-IP anonymous cap allows. */
  cap: number;
  stopped: () => boolean;
}

let seq = 0;
const ek = (server: string, cport: number) => `${server}:${cport}`;

async function create(o: LoadOptions): Promise<void> {
  const m = o.model;
  if ([...m.servers.values()].filter((s) => s.state !== 'gone').length + m.inflightCreates.length >= o.cap) return;
  const slug = `kl${process.pid.toString(36)}${(seq++).toString(36)}`;
  const key = o.rnd() < 0.6 ? o.mainKey : undefined;
  const entry = { slug, key };
  m.inflightCreates.push(entry);
  const r = await api(o.port(), 'POST', '/create', { key, body: { subdomains: [slug] } });
  if (r.status === 200) {
    m.inflightCreates.splice(m.inflightCreates.indexOf(entry), 1);
    const k = key ?? r.body.api_key;
    m.keys.set(keyHash(k), k);
    m.servers.set(r.body.id, { id: r.body.id, slug, key: k, state: 'live' });
    m.counts.create++;
  } else if (r.status === 0 || r.status >= 500) {
    m.counts.cut++;
  } else {
    m.inflightCreates.splice(m.inflightCreates.indexOf(entry), 1);
    m.refused('create', r);
    // the model holds fewer servers than the cap, so an ip_limit means the daemon counts debris
    if (r.status === 403 && r.body?.error === 'ip_limit') m.counts.ipLimit++;
  }
}

async function del(o: LoadOptions): Promise<void> {
  const live = o.model.live();
  if (live.length < 2) return;
  const s = live[Math.floor(o.rnd() * live.length)];
  s.state = 'maybe';
  const r = await api(o.port(), 'DELETE', `/servers/${s.id}`, { key: s.key });
  if (r.status === 200) {
    s.state = 'gone';
    for (const e of o.model.exposures.values()) if (e.server === s.id) e.state = 'gone';
    o.model.counts.delete++;
  } else if (r.status === 0 || r.status >= 500) o.model.counts.cut++;
  else {
    s.state = 'live';
    o.model.refused('delete', r);
  }
}

async function expose(o: LoadOptions): Promise<void> {
  const live = o.model.live();
  if (!live.length) return;
  const s = live[Math.floor(o.rnd() * live.length)];
  const cport = 7000 + Math.floor(o.rnd() * 3);
  const k = ek(s.id, cport);
  const prev = o.model.exposures.get(k);
  if (prev && prev.state !== 'gone') return;
  const e: Exp = { server: s.id, containerPort: cport, state: 'maybe' };
  o.model.exposures.set(k, e);
  const r = await api(o.port(), 'POST', '/expose', { key: s.key, body: { server: s.id, port: cport } });
  if (r.status === 200) {
    e.state = 'live';
    e.port = Number(String(r.body.public).split(':').pop());
    o.model.counts.expose++;
  } else if (r.status === 0 || r.status >= 500) o.model.counts.cut++;
  else {
    e.state = 'gone';
    o.model.refused('expose', r);
  }
}

async function unexpose(o: LoadOptions): Promise<void> {
  const live = o.model.liveExposures().filter((e) => o.model.servers.get(e.server)?.state === 'live');
  if (!live.length) return;
  const e = live[Math.floor(o.rnd() * live.length)];
  e.state = 'maybe';
  const r = await api(o.port(), 'DELETE', '/expose', { key: o.model.servers.get(e.server)!.key, body: { server: e.server, port: e.containerPort } });
  if (r.status === 200) {
    e.state = 'gone';
    o.model.counts.unexpose++;
  } else if (r.status === 0 || r.status >= 500) o.model.counts.cut++;
  else {
    e.state = 'live';
    o.model.refused('unexpose', r);
  }
}

async function recharge(o: LoadOptions): Promise<void> {
  const first = await api(o.port(), 'POST', '/account/recharge', { key: o.payKey, body: { usd: 1 } });
  if (first.status !== 402) return;
  const terms = (decodeHeader(first.headers['payment-required'] as string, 'PAYMENT-REQUIRED') as { accepts: Terms[] }).accepts[0];
  const payment = encode(await signPayment(newPayer(), terms));
  o.model.rechargeMaybe += 1;
  const r = await api(o.port(), 'POST', '/account/recharge', { key: o.payKey, body: { usd: 1 }, headers: { 'x-payment': payment } });
  if (r.status === 0 || r.status >= 500) {
    o.model.counts.cut++;
    return;
  }
  o.model.rechargeMaybe -= 1;
  if (r.status === 200) {
    o.model.rechargeAcked += 1;
    o.model.counts.recharge++;
  } else o.model.refused('recharge', r);
}

/** One worker: random operations until stopped (the kill cuts off whatever is in flight). */
export async function worker(o: LoadOptions): Promise<void> {
  while (!o.stopped()) {
    const x = o.rnd();
    if (x < 0.35) await create(o);
    else if (x < 0.55) await del(o);
    else if (x < 0.8) await expose(o);
    else if (x < 0.92) await unexpose(o);
    else await recharge(o);
    await new Promise((r) => setTimeout(r, 5));
  }
}
