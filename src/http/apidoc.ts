// The API reference as Markdown, written from an OpenAPI document (the one each app serves at
// /openapi.json, itself made from the route declarations): every operation with its parameters,
// body, answers and error statuses, then every named schema's fields. `npm run docs` writes it
// into docs/api.md and a test fails when that file no longer matches what the daemon serves.

type Json = Record<string, unknown>;

const obj = (v: unknown): Json => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : {});
const text = (v: unknown): string => (typeof v === 'string' ? v : '');
/** A cell of a Markdown table: one line, pipes escaped. */
const cell = (s: string): string => s.replace(/\s*\n\s*/g, ' ').replace(/\|/g, '\\|');
/** The anchor GitHub gives a heading: lower case, only letters, digits, spaces, `-` and `_` kept, spaces as `-`. */
const anchor = (heading: string): string =>
  heading
    .toLowerCase()
    .replace(/[^a-z0-9 _-]/g, '')
    .replace(/ /g, '-');

/** A JSON Schema as a short type: `string`, `integer \| null`, `[ExecAnswer](#execanswer)`, `array of string`, `"a" \| "b"`. */
export function typeOf(schema: unknown): string {
  const s = obj(schema);
  if (typeof s.$ref === 'string') {
    const name = s.$ref.slice(s.$ref.lastIndexOf('/') + 1);
    return `[${name}](#${anchor(name)})`;
  }
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(' \\| ');
  if ('const' in s) return JSON.stringify(s.const);
  for (const k of ['anyOf', 'oneOf'] as const) if (Array.isArray(s[k])) return (s[k] as unknown[]).map(typeOf).join(' \\| ');
  const types = Array.isArray(s.type) ? (s.type as string[]) : typeof s.type === 'string' ? [s.type] : [];
  const one = (t: string) => (t === 'array' ? `array of ${typeOf(s.items)}` : t === 'object' && s.properties ? 'object' : t);
  return types.length ? types.map(one).join(' \\| ') : 'any';
}

/** The fields of an object schema as table rows (nested objects one level, as `a.b`). */
function fieldRows(schema: unknown, prefix = ''): string[] {
  const s = obj(schema);
  const props = obj(s.properties);
  const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
  const rows: string[] = [];
  for (const [name, p] of Object.entries(props)) {
    const field = `${prefix}${name}`;
    rows.push(`| \`${field}\` | ${typeOf(p)} | ${required.has(name) ? 'yes' : ''} | ${cell(text(obj(p).description))} |`);
    if (!prefix && obj(p).properties) rows.push(...fieldRows(p, `${field}.`));
  }
  return rows;
}

function table(rows: string[]): string[] {
  return rows.length ? ['| field | type | required | description |', '|---|---|---|---|', ...rows, ''] : [];
}

/** A response object, its `$ref` to components/responses followed. */
function resolved(doc: Json, r: unknown): Json {
  const ref = obj(r).$ref;
  return typeof ref === 'string' ? obj(obj(obj(doc.components).responses)[ref.slice(ref.lastIndexOf('/') + 1)]) : obj(r);
}

function operation(doc: Json, method: string, path: string, op: Json): string[] {
  const out = [`### ${method.toUpperCase()} ${path}`, ''];
  if (op.summary) out.push(text(op.summary), '');
  if (op.description) out.push(text(op.description), '');
  out.push(Array.isArray(op.security) && op.security.length ? 'Authorization: `Bearer <api_key>`.' : 'No authorization.', '');
  const params = Array.isArray(op.parameters) ? (op.parameters as Json[]) : [];
  if (params.length) {
    out.push('| parameter | in | type | required | description |', '|---|---|---|---|---|');
    for (const p of params)
      out.push(`| \`${text(p.name)}\` | ${text(p.in)} | ${typeOf(p.schema)} | ${p.required ? 'yes' : ''} | ${cell(text(p.description))} |`);
    out.push('');
  }
  const body = obj(op.requestBody);
  for (const [media, m] of Object.entries(obj(body.content))) {
    out.push(`Body (${media}${body.required ? '' : ', optional'}): ${typeOf(obj(m).schema)}`, '');
    if (!obj(obj(m).schema).$ref) out.push(...table(fieldRows(obj(m).schema)));
  }
  out.push('| status | answer |', '|---|---|');
  for (const [status, ref] of Object.entries(obj(op.responses))) {
    const r = resolved(doc, ref);
    const media = Object.entries(obj(obj(r).content)).map(([t, m]) => `${t}: ${typeOf(obj(m).schema)}`);
    const headers = Object.keys(obj(obj(r).headers));
    const extra = [...media, ...(headers.length ? [`headers: ${headers.join(', ')}`] : [])];
    out.push(`| ${status} | ${cell(text(obj(r).description))}${extra.length ? ` (${cell(extra.join('; '))})` : ''} |`);
  }
  out.push('');
  return out;
}

/** One API's reference (a file of its own: anchors are unique in it): its operations in the
 *  document's order, then its named schemas. */
export function apiMarkdown(doc: Json): string {
  const h = '#';
  const info = obj(doc.info);
  const out = [`${h} ${text(info.title)}`, '', text(info.description), ''];
  const ops: [string, string, Json][] = [];
  for (const [path, methods] of Object.entries(obj(doc.paths)))
    for (const [method, op] of Object.entries(obj(methods))) if (typeof op === 'object') ops.push([method, path, obj(op)]);
  out.push('| operation | what it does |', '|---|---|');
  for (const [m, p, op] of ops) out.push(`| [${m.toUpperCase()} ${p}](#${anchor(`${m} ${p}`)}) | ${cell(text(op.summary))} |`);
  out.push('', 'Every error is `{"error": "<stable_code>", "detail": "<sentence>"}` with the status below.');
  out.push('');
  out.push('## Operations', '');
  for (const [m, p, op] of ops) out.push(...operation(doc, m, p, op));
  out.push('## Schemas', '');
  for (const [name, s] of Object.entries(obj(obj(doc.components).schemas))) {
    out.push(`### ${name}`, '');
    if (obj(s).description) out.push(cell(text(obj(s).description)), '');
    const rows = fieldRows(s);
    if (rows.length) out.push(...table(rows));
    else out.push(`Type: ${typeOf(s)}`, '');
  }
  return out.join('\n').replace(/\n{3,}/g, '\n\n');
}
