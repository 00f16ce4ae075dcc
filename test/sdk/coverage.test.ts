// One source of truth for both SDKs: the OpenAPI document the daemon serves. Every operation in
// it has a method in the TypeScript SDK (sdk/js) and in the Python SDK (sdk/python, the same name
// in snake_case), or is listed in both as left out with a reason; every answer and request body
// the SDKs handle (named schemas, inline answers, nested objects) has its field names listed in
// each SDK's FIELDS exactly as the document has them (a field the document has that an SDK
// leaves out is named in LEFT_OUT_FIELDS with why), every query parameter they send is one the
// operation takes, and a method named for an operation exists on the client or a server.
// (sdk/js/src/types.ts is held to the same FIELDS by the compiler.)

import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as js from '../../sdk/js/src/index.js';
import { startTestDaemon } from '../helpers/daemon.js';

const repo = new URL('../../', import.meta.url).pathname;
type Schema = Record<string, unknown> & { $ref?: string; properties?: Record<string, Schema>; items?: Schema; anyOf?: Schema[] };
type Op = {
  requestBody?: { content?: Record<string, { schema: Schema }> };
  responses: Record<string, { content?: Record<string, { schema: Schema }> }>;
  parameters?: { name: string; in: string }[];
};
interface Doc {
  paths: Record<string, Record<string, Op>>;
  components: { schemas: Record<string, Schema> };
}
interface Lists {
  OPERATIONS: Record<string, string | string[] | { leftOut?: string; left_out?: string }>;
  FIELDS: Record<string, readonly string[]>;
  LEFT_OUT_FIELDS: Record<string, string>;
  QUERY: Record<string, readonly string[]>;
  UNTYPED: Record<string, string>;
  /** method names of OPERATIONS that do not resolve to a function */
  missing: string[];
}

let doc: Doc;

test.before(async () => {
  const d = await startTestDaemon();
  const rb = new js.Rootbox({ baseUrl: `http://api.localhost:${d.http}` });
  try {
    doc = (await rb.openapi()) as unknown as Doc;
  } finally {
    rb.close();
    await d.stop();
  }
});

const METHODS = ['get', 'put', 'post', 'delete', 'patch'];
const operations = () =>
  Object.entries(doc.paths).flatMap(([p, ms]) =>
    Object.keys(ms)
      .filter((m) => METHODS.includes(m))
      .map((m) => `${m.toUpperCase()} ${p}`),
  );
const opOf = (key: string) => {
  const [m, p] = key.split(' ');
  return doc.paths[p][m.toLowerCase()];
};
const deref = (s: Schema): Schema => (s.$ref ? deref(doc.components.schemas[s.$ref.replace('#/components/schemas/', '')]) : s);
const refName = (s: Schema) => s.$ref?.replace('#/components/schemas/', '');
const fieldsOf = (s: Schema): string[] => {
  const d = deref(s);
  if (d.anyOf) return [...new Set(d.anyOf.flatMap(fieldsOf))];
  return Object.keys(d.properties ?? {});
};

/** The schema a FIELDS key names: `Name`, `METHOD /path` (200 JSON) or `METHOD /path ndjson`, then `.field` / `.field[]` steps. */
function resolve(key: string): Schema {
  const m = /^(GET|PUT|POST|DELETE) (\S+?)( ndjson)?((?:\.[A-Za-z_]+(?:\[\])?)*)$/.exec(key) ?? /^([A-Za-z]+)()()((?:\.[A-Za-z_]+(?:\[\])?)*)$/.exec(key);
  assert.ok(m, `FIELDS key ${key} is not a schema, an operation or a path in one`);
  let s: Schema;
  if (m[2]) {
    const op = doc.paths[m[2]]?.[m[1].toLowerCase()];
    assert.ok(op, `FIELDS names ${m[1]} ${m[2]}, which the document does not have`);
    const s0 = op.responses['200']?.content?.[m[3] ? 'application/x-ndjson' : 'application/json']?.schema;
    assert.ok(s0, `${key}: no 200 answer of that type`);
    s = s0;
  } else {
    s = doc.components.schemas[m[1]];
    assert.ok(s, `FIELDS names the schema ${m[1]}, which the document does not have`);
  }
  for (const step of m[4].split('.').slice(1)) {
    const field = step.replace('[]', '');
    const next = deref(s).properties?.[field];
    assert.ok(next, `${key}: no field ${field}`);
    s = step.endsWith('[]') ? deref(next).items! : next;
    assert.ok(s, `${key}: ${field} is not an array`);
  }
  return s;
}

/** Everything the document says one SDK's lists must agree with; `sdk` names it in messages. */
function check(sdk: string, l: Lists): void {
  // every operation, and nothing else
  assert.equal(Object.keys(l.OPERATIONS).sort(), operations().sort(), `${sdk}: OPERATIONS against the document`);
  assert.equal(l.missing, [], `${sdk}: methods named in OPERATIONS that do not exist`);
  // every FIELDS key resolves and lists the document's fields exactly (with the ones left out)
  for (const [key, fields] of Object.entries(l.FIELDS)) {
    const left = Object.keys(l.LEFT_OUT_FIELDS)
      .filter((k) => k.slice(0, k.lastIndexOf('.')) === key)
      .map((k) => k.slice(k.lastIndexOf('.') + 1));
    for (const f of left) assert.not.ok(fields.includes(f), `${sdk}: ${key}.${f} is both used and left out`);
    assert.equal([...fields, ...left].sort(), fieldsOf(resolve(key)).sort(), `${sdk}: FIELDS["${key}"] against the document`);
  }
  for (const [k, why] of Object.entries({ ...l.LEFT_OUT_FIELDS, ...l.UNTYPED })) assert.ok(why.length > 20, `${sdk}: ${k} needs its reason`);
  const covered = (key: string) => key in l.FIELDS || key in l.UNTYPED;
  /** A shape the SDK reads or sends: covered itself, and each inline object or array of objects in it too. */
  const shape = (key: string, s: Schema, where: string) => {
    const name = refName(s);
    if (name) return void assert.ok(covered(name), `${sdk}: ${where} uses the schema ${name}, which is neither in FIELDS nor UNTYPED`);
    const d = deref(s);
    if (d.anyOf && d.anyOf.every((x) => refName(x))) return d.anyOf.forEach((x) => shape(key, x, where));
    const fields = fieldsOf(d);
    if (fields.length === 0 || (fields.length === 1 && fields[0] === 'ok')) return; // nothing to read: the method returns nothing
    assert.ok(covered(key), `${sdk}: ${where} answers {${fields.join(', ')}}, which is neither in FIELDS nor UNTYPED as "${key}"`);
  };
  for (const op of operations()) {
    const o = l.OPERATIONS[op];
    if (o && typeof o === 'object' && !Array.isArray(o)) {
      assert.ok((o.leftOut ?? o.left_out ?? '').length > 20, `${sdk}: ${op} is left out without a reason`);
      continue;
    }
    const def = opOf(op);
    const body = def.requestBody?.content?.['application/json']?.schema;
    if (body) shape(op, body, `${op}'s body`);
    const ok = def.responses['200']?.content ?? {};
    if (ok['application/json']) shape(op, ok['application/json'].schema, `${op}'s answer`);
    if (ok['application/x-ndjson']) shape(`${op} ndjson`, ok['application/x-ndjson'].schema, `${op}'s NDJSON answer`);
    // query parameters it sends are ones the operation takes
    const takes = (def.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name);
    for (const q of l.QUERY[op] ?? []) assert.ok(takes.includes(q), `${sdk}: ${op} sends ?${q}, which it does not take`);
  }
  for (const op of Object.keys(l.QUERY)) assert.ok(operations().includes(op), `${sdk}: QUERY names ${op}`);
  // nested objects of every covered shape are covered too
  for (const key of Object.keys(l.FIELDS)) {
    const d = deref(resolve(key));
    for (const [f, s] of Object.entries(d.properties ?? {})) {
      if (refName(s)) continue; // its own schema, checked where it is used
      const inner = deref(s);
      const items = inner.items ? deref(inner.items) : undefined;
      if (inner.properties && Object.keys(inner.properties).length)
        assert.ok(covered(`${key}.${f}`), `${sdk}: ${key}.${f} is an object neither in FIELDS nor UNTYPED`);
      if (items?.properties && !refName(inner.items!)) assert.ok(covered(`${key}.${f}[]`), `${sdk}: ${key}.${f}[] are objects neither in FIELDS nor UNTYPED`);
    }
  }
}

test('the TypeScript SDK has a method for every operation of the served document, and its field names are the document’s', () => {
  const rb = new js.Rootbox({ baseUrl: 'http://api.localhost:1' });
  const on = { rootbox: rb as unknown, server: rb.server('srv_0') as unknown };
  const missing: string[] = [];
  for (const v of Object.values(js.OPERATIONS))
    for (const name of typeof v === 'string' ? [v] : Array.isArray(v) ? [...(v as readonly string[])] : []) {
      const [root, ...path] = (name as string).split('.');
      const fn = path.reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], on[root as keyof typeof on]);
      if (typeof fn !== 'function') missing.push(name);
    }
  rb.close();
  check('sdk/js', { ...js, missing } as unknown as Lists);
});

test('the Python SDK has the same operations in snake_case, and its field names are the document’s', () => {
  const script = `
import json, rootbox
c = rootbox.Rootbox(base_url="http://api.localhost:1")
on = {"rootbox": c, "server": c.server("srv_0")}
missing = []
for v in rootbox.OPERATIONS.values():
    for name in ([v] if isinstance(v, str) else v if isinstance(v, list) else []):
        root, *path = name.split(".")
        o = on[root]
        for k in path:
            o = getattr(o, k, None)
        if not callable(o):
            missing.append(name)
print(json.dumps({"OPERATIONS": rootbox.OPERATIONS, "FIELDS": rootbox.FIELDS, "LEFT_OUT_FIELDS": rootbox.LEFT_OUT_FIELDS, "QUERY": rootbox.QUERY, "UNTYPED": rootbox.UNTYPED, "missing": missing}))
`;
  const r = spawnSync('python3', ['-c', script], {
    env: { PATH: process.env.PATH, PYTHONPATH: join(repo, 'sdk', 'python', 'src'), PYTHONDONTWRITEBYTECODE: '1' },
    encoding: 'utf8',
  });
  assert.is(r.status, 0, r.stderr);
  const py = JSON.parse(r.stdout) as Lists;
  check('sdk/python', py);
  // the same names as the TypeScript SDK's, in snake_case
  const snake = (s: string) => s.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
  for (const [op, v] of Object.entries(js.OPERATIONS)) {
    const want = typeof v === 'string' ? snake(v) : Array.isArray(v) ? v.map(snake) : 'left out';
    const got = py.OPERATIONS[op];
    assert.equal(typeof got === 'object' && !Array.isArray(got) ? 'left out' : got, want, `${op}: the Python method is not the TypeScript one in snake_case`);
  }
  assert.equal(py.FIELDS, JSON.parse(JSON.stringify(js.FIELDS)));
  assert.equal(py.QUERY, JSON.parse(JSON.stringify(js.QUERY)));
  assert.equal(Object.keys(py.LEFT_OUT_FIELDS).sort(), Object.keys(js.LEFT_OUT_FIELDS).sort());
  assert.equal(Object.keys(py.UNTYPED).sort(), Object.keys(js.UNTYPED).sort());
});

test.run();
