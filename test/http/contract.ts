// Checks real answers against a published OpenAPI 3.1 document: the path and method must be
// documented (or the answer is the path's documented 405), the status must be documented for that
// operation, required headers present, the content type one of the documented media types and a
// JSON body valid against its schema (ajv, JSON Schema 2020-12, refs into components). Records
// which operations and statuses were seen, so a suite can require that every route was exercised.

import { request } from 'node:http';
import { Ajv2020 } from 'ajv/dist/2020.js';

export interface Answer {
  status: number;
  headers: Record<string, string>;
  text: string;
  json: any;
}

type Json = Record<string, any>;

export class Contract {
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false, validateFormats: false });
  private readonly paths: [RegExp, string][];
  /** `METHOD /template` → statuses seen. */
  readonly seen = new Map<string, Set<number>>();

  constructor(
    readonly doc: Json,
    private readonly id: string,
  ) {
    this.ajv.addSchema({ ...doc, $id: `https://contract.test/${id}` });
    this.paths = Object.keys(doc.paths).map((p) => [new RegExp(`^${p.replace(/\{\w+\}/g, '[^/]+')}$`), p]);
  }

  /** Every documented operation, as `METHOD /template`. */
  operations(): string[] {
    return Object.entries(this.doc.paths as Json).flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`));
  }

  /** Throws with what does not match; returns the answer for chaining. */
  check(method: string, target: string, a: Answer): Answer {
    const where = `${method} ${target} → ${a.status}`;
    const path = target.split('?')[0];
    const tpl = this.paths.find(([re]) => re.test(path))?.[1];
    if (!tpl) throw new Error(`${where}: path not documented`);
    const ops = this.doc.paths[tpl] as Json;
    let op = ops[method.toLowerCase()];
    if (!op) {
      if (a.status !== 405) throw new Error(`${where}: ${method} is not documented on ${tpl} and the answer is not 405`);
      op = Object.values(ops)[0];
    }
    let res = op.responses[String(a.status)];
    if (!res) throw new Error(`${where}: status not documented (documented: ${Object.keys(op.responses).join(', ')}); body ${a.text.slice(0, 300)}`);
    const ptr = ['paths', tpl, ops[method.toLowerCase()] ? method.toLowerCase() : Object.keys(ops)[0], 'responses', String(a.status)];
    if (res.$ref) {
      ptr.splice(0, ptr.length, ...res.$ref.slice(2).split('/'));
      res = this.resolve(res.$ref);
    }
    for (const [name, h] of Object.entries((res.headers ?? {}) as Json)) {
      if (h.required && a.headers[name.toLowerCase()] === undefined) throw new Error(`${where}: required header ${name} missing`);
    }
    if (!res.content) {
      if (a.text.length) throw new Error(`${where}: documented without a body but has one: ${a.text.slice(0, 200)}`);
    } else {
      const type = (a.headers['content-type'] ?? '').split(';')[0].trim();
      if (!res.content[type]) throw new Error(`${where}: content type ${type || '(none)'} not documented (${Object.keys(res.content).join(', ')})`);
      if (type === 'application/json') {
        const pointer = [...ptr, 'content', type, 'schema'].map((s) => s.replace(/~/g, '~0').replace(/\//g, '~1')).join('/');
        const validate = this.ajv.getSchema(`https://contract.test/${this.id}#/${pointer}`);
        if (!validate) throw new Error(`${where}: no schema at ${pointer}`);
        if (!validate(a.json))
          throw new Error(`${where}: body does not match the document: ${this.ajv.errorsText(validate.errors)}; body ${a.text.slice(0, 400)}`);
      }
    }
    // a 405 counts for every operation of the path (each documents it); other answers for their own
    for (const m of ops[method.toLowerCase()] ? [method.toLowerCase()] : Object.keys(ops)) {
      const key = `${m.toUpperCase()} ${tpl}`;
      const got = this.seen.get(key) ?? new Set<number>();
      this.seen.set(key, got.add(a.status));
    }
    return a;
  }

  private resolve(ref: string): Json {
    return ref
      .slice(2)
      .split('/')
      .reduce((o: Json, k) => o[k.replace(/~1/g, '/').replace(/~0/g, '~')], this.doc);
  }

  /** Operations never answered (a 405 for another method does not count), and documented
   *  statuses never seen (for the log). */
  coverage(): { missing: string[]; unseen: string[] } {
    const missing = this.operations().filter((o) => ![...(this.seen.get(o) ?? [])].some((s) => s !== 405));
    const unseen: string[] = [];
    for (const [p, ops] of Object.entries(this.doc.paths as Json)) {
      for (const [m, op] of Object.entries(ops as Json)) {
        const got = this.seen.get(`${m.toUpperCase()} ${p}`) ?? new Set();
        const not = Object.keys(op.responses).filter((s) => !got.has(Number(s)));
        if (not.length) unseen.push(`${m.toUpperCase()} ${p}: ${not.join(' ')}`);
      }
    }
    return { missing, unseen };
  }
}

export interface SendOptions {
  headers?: Record<string, string>;
  /** An object is sent as JSON; a string or Buffer as is. */
  body?: unknown;
  /** Source address (another loopback address has its own rate limits). */
  from?: string;
}

/** One request over its own connection to 127.0.0.1:port with the given Host. */
export function send(port: number, host: string, method: string, path: string, o: SendOptions = {}): Promise<Answer> {
  const raw = o.body === undefined ? undefined : typeof o.body === 'string' || Buffer.isBuffer(o.body) ? o.body : JSON.stringify(o.body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        localAddress: o.from,
        agent: false,
        headers: { host, ...(raw !== undefined ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(raw)) } : {}), ...o.headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = undefined;
          }
          const headers: Record<string, string> = {};
          for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
          resolve({ status: res.statusCode ?? 0, headers, text, json });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(raw);
  });
}
