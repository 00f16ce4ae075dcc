// Request body reading with a hard size cap, and JSON parsing with clear 400/413/415 errors.

import { AppError } from '../errors.js';
import type { Req } from './types.js';

export async function readBody(req: Req, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    throw AppError.of('body_too_large', `request body is ${declared} bytes; this route accepts at most ${limit}`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) {
      req.resume?.();
      throw AppError.of('body_too_large', `request body exceeds ${limit} bytes, the limit of this route`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}

/**
 * Parses a JSON body. An empty body reads as undefined (routes whose body is optional). A body
 * that parses as JSON is taken whatever content type it declares (`curl -d '{…}'` sends
 * application/x-www-form-urlencoded: a first try from a shell works); one that does not is 415
 * under another declared type (a form, plain text), 400 `invalid_json` under a JSON type or none.
 */
export async function readJson(req: Req, limit: number): Promise<unknown> {
  const buf = await readBody(req, limit);
  if (buf.length === 0) return undefined;
  const type = String(req.headers['content-type'] ?? '')
    .split(';')[0]
    .trim()
    .toLowerCase();
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch (e) {
    if (type && type !== 'application/json' && !type.endsWith('+json'))
      throw AppError.of('unsupported_media_type', `send the body as JSON (got ${type.slice(0, 100)} that is not JSON)`);
    throw AppError.of('invalid_json', `the body is not valid JSON: ${(e as Error).message.slice(0, 200)}`);
  }
}
