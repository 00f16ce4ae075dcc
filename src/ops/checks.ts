// One row of `rootbox doctor`: what was checked, whether it is required, what was found and the
// fix; and the table the rows print as. The host's checks (doctor.ts) and the Node runtime's
// (noderuntime.ts) both make rows.

export interface Check {
  name: string;
  required: boolean;
  ok: boolean;
  detail: string;
  fix: string;
}

export function formatChecks(checks: Check[]): string {
  const rows = checks.map((c) => [c.ok ? 'ok' : c.required ? 'MISSING' : 'missing (optional)', c.name, c.detail, c.ok ? '' : c.fix]);
  const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i].length), 6));
  return rows.map((r) => `${r[0].padEnd(widths[0])}  ${r[1].padEnd(widths[1])}  ${r[2].padEnd(widths[2])}  ${r[3]}`.trimEnd()).join('\n');
}
