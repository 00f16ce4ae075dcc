// Plain-text output of the admin CLI for people: aligned tables, sizes in MiB/GiB, key: value
// blocks. Scripts use --json instead; nothing here is parsed.

export function table(headers: string[], rows: (string | number | null | undefined)[][]): string {
  const cells = rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : String(c))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => r[i]?.length ?? 0)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(headers), ...cells.map(line)].join('\n');
}

export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${u === 0 ? v : v >= 100 ? Math.round(v) : Math.round(v * 10) / 10} ${units[u]}`;
}

/** `key: value` lines; nested objects are indented, arrays joined with commas. */
export function block(obj: Record<string, unknown>, indent = ''): string {
  const out: string[] = [];
  for (const [k, v] of Object.entries(obj)) {
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      out.push(`${indent}${k}:`, block(v as Record<string, unknown>, indent + '  '));
    } else {
      const text = Array.isArray(v)
        ? v.length
          ? v.map((x) => (typeof x === 'object' ? JSON.stringify(x) : String(x))).join(', ')
          : '-'
        : v === null || v === undefined
          ? '-'
          : String(v);
      out.push(`${indent}${k}: ${text}`);
    }
  }
  return out.filter((l) => l !== '').join('\n');
}

export const day = (iso: string | null | undefined): string => (iso ? iso.slice(0, 16).replace('T', ' ') : '-');
