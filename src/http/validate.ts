// Validates a parsed body or query with a zod schema; failures become 400 with a detail that
// names the field and the rule, never a stack. A refinement may name the catalogue code its
// failure answers (`params: { code }`, e.g. invalid_path); every other failure is invalid_request.

import type { z } from 'zod';
import { CATALOGUE } from '../catalogue.js';
import { AppError } from '../errors.js';

export function validate<S extends z.ZodType>(schema: S, value: unknown, what = 'body'): z.output<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const first = r.error.issues[0];
  const field = first.path.length ? first.path.join('.') : what;
  const own = first.code === 'custom' ? (first.params as { code?: unknown } | undefined)?.code : undefined;
  const code = typeof own === 'string' && own in CATALOGUE ? (own as keyof typeof CATALOGUE) : 'invalid_request';
  throw AppError.of(code, `${field}: ${first.message}`, {
    extra: { issues: r.error.issues.slice(0, 10).map((i) => ({ path: i.path.join('.'), message: i.message })) },
  });
}
