// The OpenAPI 3.1 document of an API, derived from its declared routes (route.ts): paths,
// parameters, request bodies, every answer by status with its body schema and headers, security.
// Schemas come from zod 4's z.toJSONSchema (request inputs as the input type, answers as the
// output type); named schemas become components, everything else is inlined. zod's stand-in
// bounds of ±(2^53−1) for `.int()` are left out: an integer without a real bound has none.

import { z } from 'zod';
import type { AnswerDoc, Authenticator, Route } from './route.js';
import { answersOf, ERROR_SCHEMAS, STANDARD } from './schemas.js';

export interface ApiInfo {
  title: string;
  version: string;
  description: string;
}

type Json = Record<string, unknown>;
type Io = 'input' | 'output';

const dropSafeBounds = ({ jsonSchema: j }: { jsonSchema: Json }) => {
  if (j.minimum === Number.MIN_SAFE_INTEGER) delete j.minimum;
  if (j.maximum === Number.MAX_SAFE_INTEGER) delete j.maximum;
};

/** One schema as JSON Schema 2020-12, everything inlined (the x402 manifest's input/output). */
export function jsonSchemaOf(s: z.ZodType, io: Io): Json {
  const j = z.toJSONSchema(s, { io, unrepresentable: 'any', override: dropSafeBounds as never }) as Json;
  delete j.$schema;
  return j;
}

const REF = '#/components/schemas/';

/** Emits the schemas of one io mode: named ones as components, the others (a temporary id) to inline. */
class Pass {
  private readonly reg = z.registry<{ id: string }>();
  private readonly ids = new Map<z.ZodType, string>();
  private out: Record<string, Json> = {};
  constructor(
    private readonly io: Io,
    private readonly names: Map<z.ZodType, string>,
    private readonly prefix: string,
  ) {}

  use(s: z.ZodType): void {
    if (this.ids.has(s)) return;
    const id = this.names.get(s) ?? `${this.prefix}${this.ids.size}`;
    this.ids.set(s, id);
    this.reg.add(s, { id });
  }

  named(s: z.ZodType): boolean {
    return this.ids.has(s) && this.names.has(s);
  }

  emit(): void {
    const { schemas } = z.toJSONSchema(this.reg, { io: this.io, uri: (id) => REF + id, unrepresentable: 'any', override: dropSafeBounds as never }) as {
      schemas: Record<string, Json>;
    };
    for (const s of Object.values(schemas)) {
      delete s.$schema;
      delete s.$id;
    }
    this.out = schemas;
  }

  /** A $ref for a named schema, the schema itself otherwise. */
  ref(s: z.ZodType): Json {
    const id = this.ids.get(s)!;
    return this.names.has(s) ? { $ref: REF + id } : this.out[id];
  }

  components(): Record<string, Json> {
    return Object.fromEntries(Object.entries(this.out).filter(([id]) => !id.startsWith(this.prefix)));
  }
}

/** Properties of an object schema as OpenAPI parameters `in` path or query. */
function parameters(schema: Json, where: 'path' | 'query'): Json[] {
  const props = (schema.properties ?? {}) as Record<string, Json>;
  const required = new Set((schema.required as string[] | undefined) ?? []);
  return Object.entries(props).map(([name, { description, ...s }]) => ({
    name,
    in: where,
    required: where === 'path' || required.has(name),
    ...(description ? { description } : {}),
    schema: s,
  }));
}

export function openApiDocument(o: {
  info: ApiInfo;
  routes: readonly Route[];
  schemas: Record<string, z.ZodType>;
  auth?: Authenticator<unknown>;
  serverUrl?: string;
}): Json {
  const names = new Map<z.ZodType, string>();
  for (const [id, s] of Object.entries({ ...ERROR_SCHEMAS, ...o.schemas })) names.set(s, id);
  // an optional body of a named schema is documented as that schema (requestBody.required: false)
  const bodyOf = (s: z.ZodType) => (s instanceof z.ZodOptional && names.has(s.unwrap() as z.ZodType) ? (s.unwrap() as z.ZodType) : s);
  const input = new Pass('input', names, '~in');
  const output = new Pass('output', names, '~out');
  const answers = o.routes.map((r) => answersOf(r, o.auth?.responses));
  o.routes.forEach((r, i) => {
    for (const s of [r.body && bodyOf(r.body), r.query, r.params]) if (s) input.use(s);
    for (const a of Object.values(answers[i])) for (const s of [a.json, ...Object.values(a.media ?? {})]) if (s) output.use(s);
  });
  for (const s of names.keys()) if (!input.named(s)) output.use(s);
  input.emit();
  output.emit();
  const inputs = input.components();
  const components = { ...output.components() };
  for (const [id, s] of Object.entries(inputs)) {
    if (components[id] && JSON.stringify(components[id]) !== JSON.stringify(s))
      throw new Error(`schema ${id} differs as request and as answer; name them apart`);
    components[id] = s;
  }
  const dangling = JSON.stringify(components).match(/"#\/components\/schemas\/~[a-z]+\d+"/);
  if (dangling) throw new Error(`a named schema refers to an unnamed one (${dangling[0]}); name it in the API's schemas`);

  const ref = (s: z.ZodType) => output.ref(s);
  const shared = new Map(Object.entries(STANDARD).map(([name, [, a]]) => [a, name]));
  const responses = Object.fromEntries(Object.entries(STANDARD).map(([name, [, a]]) => [name, answer(a, ref)]));
  const paths: Record<string, Record<string, Json>> = {};
  o.routes.forEach((r, i) => {
    const path = r.path.replace(/:(\w+)/g, '{$1}');
    const security = r.auth === 'none' || !o.auth ? undefined : r.auth === 'bearer' ? [{ [o.auth.scheme.name]: [] }] : [{}, { [o.auth.scheme.name]: [] }];
    const params = [
      ...(r.params ? parameters(input.ref(r.params), 'path') : []),
      ...(r.query ? parameters(input.ref(r.query), 'query') : []),
      ...Object.entries(r.headers ?? {}).map(([name, h]) => ({
        name,
        in: 'header',
        required: h.required ?? false,
        description: h.description,
        schema: { type: 'string' },
      })),
    ];
    (paths[path] ??= {})[r.method.toLowerCase()] = {
      summary: r.summary,
      ...(r.description ? { description: r.description } : {}),
      ...(security ? { security } : {}),
      ...(params.length ? { parameters: params } : {}),
      ...(r.body
        ? { requestBody: { required: !r.body.safeParse(undefined).success, content: { 'application/json': { schema: input.ref(bodyOf(r.body)) } } } }
        : {}),
      responses: Object.fromEntries(
        Object.entries(answers[i]).map(([status, a]) => [status, shared.has(a) ? { $ref: `#/components/responses/${shared.get(a)}` } : answer(a, ref)]),
      ),
    };
  });
  return {
    openapi: '3.1.0',
    info: o.info,
    ...(o.serverUrl ? { servers: [{ url: o.serverUrl }] } : {}),
    paths,
    components: { schemas: components, responses, ...(o.auth ? { securitySchemes: { [o.auth.scheme.name]: o.auth.scheme.doc } } : {}) },
  };
}

function answer(a: AnswerDoc, ref: (s: z.ZodType) => Json): Json {
  const content = { ...(a.json ? { 'application/json': { schema: ref(a.json) } } : {}) } as Json;
  for (const [type, s] of Object.entries(a.media ?? {})) content[type] = { schema: ref(s) };
  const headers = Object.entries(a.headers ?? {}).map(([name, h]) => [
    name,
    { description: h.description, required: h.required ?? false, schema: { type: 'string' } },
  ]);
  return {
    description: a.description,
    ...(headers.length ? { headers: Object.fromEntries(headers) } : {}),
    ...(Object.keys(content).length ? { content } : {}),
  };
}

/** The document of a router's routes, built once and served with the URL the client used. */
export function documentOf(o: {
  info: ApiInfo;
  routes: () => readonly Route[];
  schemas: Record<string, z.ZodType>;
  auth?: Authenticator<unknown>;
}): (serverUrl?: string) => Json {
  let doc: Json | undefined;
  return (serverUrl) => {
    doc ??= openApiDocument({ ...o, routes: o.routes() });
    const { openapi, info, ...rest } = doc;
    return { openapi, info, ...(serverUrl ? { servers: [{ url: serverUrl }] } : {}), ...rest };
  };
}
