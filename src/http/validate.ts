// Validates a parsed body or query with a zod schema; failures become 400 with a detail that
// names the field and the rule, never a stack.

import type { z } from 'zod';
import { AppError } from '../errors.js';

export function validate<S extends z.ZodType>(schema: S, value: unknown, what = 'body'): z.output<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const first = r.error.issues[0];
  const field = first.path.length ? first.path.join('.') : what;
  throw AppError.of('invalid_request', `${field}: ${first.message}`, {
    extra: { issues: r.error.issues.slice(0, 10).map((i) => ({ path: i.path.join('.'), message: i.message })) },
  });
}
