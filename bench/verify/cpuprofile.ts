// Summarises a V8 .cpuprofile as milliseconds per call: self time by function (top 25), by package
// or source folder, and inclusive time of the frames whose names match a few stages of a paid call.
// Usage: node --import tsx bench/verify/cpuprofile.ts <file.cpuprofile> <calls>

import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

const where = (url: string) => {
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1];
  const s = /\/(src|test|bench)\/([^/]+)/.exec(url);
  if (s) return `${s[1]}/${s[2]}`;
  return url.startsWith('node:') ? url : url ? 'other' : '(native/vm)';
};

export function summarise(
  p: Profile,
  calls: number,
  stages = ['recoverTypedDataAddress', 'signTransaction', 'chat', 'parsePayload', 'putSync', 'txSync', 'emit'],
): string {
  const self = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const fn = new Map<string, number>();
  const pkg = new Map<string, number>();
  const incl = new Map<string, number>();
  let total = 0;
  let idle = 0;
  for (const [id, ms] of self) {
    const n = byId.get(id)!;
    const name = n.callFrame.functionName || '(anonymous)';
    if (name === '(idle)' || name === '(program)') {
      idle += name === '(idle)' ? ms : 0;
      if (name === '(idle)') continue;
    }
    total += ms;
    const k = `${name} ${where(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
    fn.set(k, (fn.get(k) ?? 0) + ms);
    pkg.set(where(n.callFrame.url), (pkg.get(where(n.callFrame.url)) ?? 0) + ms);
    const seen = new Set<string>();
    for (let x: number | undefined = id; x !== undefined; x = parent.get(x)) {
      const f = byId.get(x)!.callFrame.functionName;
      for (const s of stages) if (f === s && !seen.has(s)) (seen.add(s), incl.set(s, (incl.get(s) ?? 0) + ms));
    }
  }
  const per = (ms: number) => (ms / calls).toFixed(3).padStart(8);
  const top = (m: Map<string, number>, n: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, v]) => `     ${per(v)} ms  ${k}`)
      .join('\n');
  return [
    `   CPU in the profile per call ${per(total)} ms (idle ${per(idle)} ms); self time by function:`,
    top(fn, 25),
    '   by package / folder:',
    top(pkg, 15),
    '   inclusive, by stage:',
    top(incl, stages.length),
  ].join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(summarise(JSON.parse(readFileSync(process.argv[2], 'utf8')) as Profile, Number(process.argv[3] ?? 1)));
}
