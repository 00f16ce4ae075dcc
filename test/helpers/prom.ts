// A small, strict parser of the Prometheus text exposition format (0.0.4): HELP and TYPE lines,
// samples with labels, and histogram consistency (cumulative buckets ending in le="+Inf" equal
// to _count, a _sum for each series). Anything it does not understand is an error, so a test
// using it fails on malformed output instead of reading past it.

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  type: MetricType;
  help: string;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(s: string, line: number): number {
  if (s === '+Inf') return Infinity;
  if (s === '-Inf') return -Infinity;
  if (s === 'NaN') return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(s)) throw new Error(`line ${line}: bad value ${JSON.stringify(s)}`);
  return Number(s);
}

function parseLabels(s: string, line: number): [Record<string, string>, string] {
  const labels: Record<string, string> = {};
  let i = 1; // after '{'
  for (;;) {
    if (s[i] === '}') return [labels, s.slice(i + 1)];
    const eq = s.indexOf('=', i);
    if (eq < 0) throw new Error(`line ${line}: label without '='`);
    const name = s.slice(i, eq);
    if (!LABEL.test(name)) throw new Error(`line ${line}: bad label name ${JSON.stringify(name)}`);
    if (name in labels) throw new Error(`line ${line}: label ${name} twice`);
    if (s[eq + 1] !== '"') throw new Error(`line ${line}: label value not quoted`);
    let v = '';
    let j = eq + 2;
    for (;;) {
      const c = s[j];
      if (c === undefined) throw new Error(`line ${line}: unterminated label value`);
      if (c === '"') break;
      if (c === '\\') {
        const n = s[j + 1];
        if (n === '\\') v += '\\';
        else if (n === '"') v += '"';
        else if (n === 'n') v += '\n';
        else throw new Error(`line ${line}: bad escape \\${n}`);
        j += 2;
        continue;
      }
      v += c;
      j++;
    }
    labels[name] = v;
    i = j + 1;
    if (s[i] === ',') i++;
    else if (s[i] !== '}') throw new Error(`line ${line}: expected ',' or '}' after a label`);
  }
}

function familyOf(name: string, families: Map<string, Family>): Family | undefined {
  const direct = families.get(name);
  if (direct && direct.type !== 'histogram' && direct.type !== 'summary') return direct;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const f = families.get(name.slice(0, -suffix.length));
    if (f && (f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket'))) return f;
  }
  if (direct?.type === 'summary') return direct;
  return undefined;
}

export function parseExposition(text: string): Map<string, Family> {
  if (!text.endsWith('\n')) throw new Error('exposition does not end with a newline');
  const families = new Map<string, Family>();
  const seen = new Set<string>();
  const lines = text.split('\n');
  lines.pop();
  lines.forEach((raw, idx) => {
    const line = idx + 1;
    if (raw === '') return;
    if (raw.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(raw);
      if (!m) return; // a plain comment
      const [, kind, name, rest] = m;
      if (!NAME.test(name)) throw new Error(`line ${line}: bad metric name ${name}`);
      const f = families.get(name) ?? { name, type: 'untyped' as MetricType, help: '', samples: [] };
      if (f.samples.length) throw new Error(`line ${line}: ${kind} for ${name} after its samples`);
      if (kind === 'TYPE') {
        if (!TYPES.has(rest)) throw new Error(`line ${line}: unknown type ${rest}`);
        if (seen.has(`T ${name}`)) throw new Error(`line ${line}: second TYPE for ${name}`);
        seen.add(`T ${name}`);
        f.type = rest as MetricType;
      } else {
        if (seen.has(`H ${name}`)) throw new Error(`line ${line}: second HELP for ${name}`);
        seen.add(`H ${name}`);
        f.help = rest.replace(/\\n/g, '\n').replace(/\\\\/g, '\\');
      }
      families.set(name, f);
      return;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(.*)$/.exec(raw);
    if (!m) throw new Error(`line ${line}: not a sample: ${raw}`);
    const name = m[1];
    let rest = m[2];
    let labels: Record<string, string> = {};
    if (rest.startsWith('{')) [labels, rest] = parseLabels(rest, line);
    const parts = rest.trim().split(/ +/);
    if (!rest.startsWith(' ') || parts.length < 1 || parts.length > 2) throw new Error(`line ${line}: bad sample: ${raw}`);
    if (parts[1] !== undefined && !/^-?\d+$/.test(parts[1])) throw new Error(`line ${line}: bad timestamp`);
    const family = familyOf(name, families);
    if (!family) throw new Error(`line ${line}: sample ${name} has no TYPE before it`);
    const key = name + JSON.stringify(Object.entries(labels).sort());
    if (seen.has(key)) throw new Error(`line ${line}: sample ${name} repeated with the same labels`);
    seen.add(key);
    family.samples.push({ name, labels, value: parseValue(parts[0], line) });
  });
  for (const f of families.values()) if (f.type === 'histogram') checkHistogram(f);
  return families;
}

function checkHistogram(f: Family): void {
  const series = new Map<string, { buckets: [number, number][]; sum?: number; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const e = series.get(key) ?? { buckets: [] };
    series.set(key, e);
    if (s.name === `${f.name}_bucket`) {
      if (le === undefined) throw new Error(`${f.name}: bucket without le`);
      e.buckets.push([parseValue(le, 0), s.value]);
    } else if (s.name === `${f.name}_sum`) e.sum = s.value;
    else if (s.name === `${f.name}_count`) e.count = s.value;
    else throw new Error(`${f.name}: unexpected sample ${s.name}`);
  }
  for (const [key, e] of series) {
    if (e.sum === undefined || e.count === undefined) throw new Error(`${f.name}${key}: _sum or _count missing`);
    if (!e.buckets.length || e.buckets[e.buckets.length - 1][0] !== Infinity) throw new Error(`${f.name}${key}: no le="+Inf" bucket last`);
    for (let i = 1; i < e.buckets.length; i++) {
      if (!(e.buckets[i][0] > e.buckets[i - 1][0])) throw new Error(`${f.name}${key}: bucket bounds not increasing`);
      if (e.buckets[i][1] < e.buckets[i - 1][1]) throw new Error(`${f.name}${key}: buckets not cumulative`);
    }
    if (e.buckets[e.buckets.length - 1][1] !== e.count) throw new Error(`${f.name}${key}: +Inf bucket ${e.buckets.at(-1)![1]} != _count ${e.count}`);
    if (e.count > 0 && !(e.sum >= 0)) throw new Error(`${f.name}${key}: negative _sum`);
  }
}

/** The value of one sample (0 when the series does not exist yet: counters start unexported). */
export function sampleValue(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  for (const f of families.values())
    for (const s of f.samples)
      if (s.name === name && Object.keys(labels).length === Object.keys(s.labels).length && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
        return s.value;
  return 0;
}
