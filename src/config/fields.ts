// Reusable field types for the config schema: durations, ports, byte sizes, lists from env.

import { z } from 'zod';

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Parses `500ms`, `30s`, `5m`, `1h`, `2d` or a plain number of milliseconds. */
export function parseDuration(input: string | number): number | null {
  if (typeof input === 'number') return Number.isFinite(input) && input >= 0 ? Math.round(input) : null;
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(input);
  if (!m) return null;
  return Math.round(Number(m[1]) * UNITS[m[2] ?? 'ms']);
}

/** A duration in milliseconds, written as a number or `500ms`/`30s`/`5m`/`1h`/`2d`. */
export const duration = () =>
  z.union([z.number(), z.string()]).transform((v, ctx) => {
    const ms = parseDuration(v);
    if (ms === null) {
      ctx.addIssue({ code: 'custom', message: 'must be a duration like 500ms, 30s, 5m, 1h or a number of milliseconds' });
      return z.NEVER;
    }
    return ms;
  });

export const port = () => z.coerce.number().int().min(0).max(65535);

export const bool = () =>
  z
    .union([z.boolean(), z.enum(['true', 'false', '1', '0', 'yes', 'no'])])
    .transform((v) => (typeof v === 'boolean' ? v : v === 'true' || v === '1' || v === 'yes'));

/** A list given as a JSON array or, from the environment, a comma-separated string. */
export const list = <T extends z.ZodType>(item: T) =>
  z.preprocess(
    (v) =>
      typeof v === 'string'
        ? v
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean)
        : v,
    z.array(item),
  );

export const url = () => z.string().url();
