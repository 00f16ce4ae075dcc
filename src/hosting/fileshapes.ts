// What the files routes of /servers/{id}/files take and answer (files.ts does the work): the
// query and answer schemas (absolute paths without `..`: 400 invalid_path), a file's content
// type by its extension, the headers of a read, and a single `bytes=` Range.

import { posix } from 'node:path';
import { z } from 'zod';

const absPath = z
  .string()
  .max(4096)
  .refine((p) => p.startsWith('/') && !p.includes('\0') && !p.split('/').includes('..'), {
    message: 'must be an absolute path without NUL or `..`',
    params: { code: 'invalid_path' }, // the catalogue's code for it, not invalid_request (http/validate.ts)
  })
  .transform((p) => posix.normalize(p).replace(/(.)\/$/, '$1'))
  .describe('Absolute path inside the server.');
const flag = z.enum(['1', 'true']).optional();

export const FilesQuery = z.object({
  path: absPath,
  list: flag.describe('GET: list the directory at path instead of reading a file.'),
  archive: flag.describe('GET: the directory at path as a tar archive.'),
  gzip: flag.describe('GET with archive=1: gzip the tar.'),
  mode: z
    .string()
    .regex(/^[0-7]{3,4}$/, 'must be octal, like 644 or 0755')
    .optional()
    .describe('PUT: permission bits of the written file (octal; default 644 for a new file).'),
});
export type FilesQuery = z.infer<typeof FilesQuery>;
export const ArchiveQuery = z.object({ path: absPath });

export const FileEntry = z.object({
  name: z.string(),
  type: z.enum(['file', 'dir', 'symlink', 'other']),
  size: z.number().int(),
  mode: z.string().describe('Permission bits, octal.'),
  mtime: z.string().describe('Last modification (ISO 8601).'),
});
export const FileList = z.object({
  path: z.string(),
  entries: z.array(FileEntry),
  truncated: z.boolean().describe('More than 10000 entries: the rest left out.'),
});
export const Written = z.object({ path: z.string(), size: z.number().int() });

export const LIST_MAX = 10_000;
const TYPES: Record<string, string> = {
  html: 'text/html; charset=utf-8',
  htm: 'text/html; charset=utf-8',
  txt: 'text/plain; charset=utf-8',
  md: 'text/markdown; charset=utf-8',
  css: 'text/css; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  json: 'application/json',
  xml: 'application/xml',
  csv: 'text/csv; charset=utf-8',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  svg: 'image/svg+xml',
  webp: 'image/webp',
  pdf: 'application/pdf',
  zip: 'application/zip',
  gz: 'application/gzip',
  tar: 'application/x-tar',
  sh: 'text/x-shellscript; charset=utf-8',
  py: 'text/x-python; charset=utf-8',
};
export const typeOf = (p: string) => TYPES[posix.extname(p).slice(1).toLowerCase()] ?? 'application/octet-stream';

export const readHeaders = (path: string, length: number): Record<string, string> => ({
  'content-type': typeOf(path),
  'content-length': String(length),
  'accept-ranges': 'bytes',
  'x-content-type-options': 'nosniff',
});

/** [start, end] of a single `bytes=` range, 'unsatisfiable', or undefined (whole file). */
export function parseRange(h: string | undefined, size: number): [number, number] | 'unsatisfiable' | undefined {
  const m = /^bytes=(\d*)-(\d*)$/.exec(String(h ?? '').trim());
  if (!m || (!m[1] && !m[2])) return undefined;
  if (!m[1]) {
    const n = Number(m[2]);
    if (n === 0 || size === 0) return 'unsatisfiable';
    return [Math.max(0, size - n), size - 1];
  }
  const start = Number(m[1]);
  const end = m[2] ? Math.min(Number(m[2]), size - 1) : size - 1;
  if (start >= size || end < start) return 'unsatisfiable';
  return [start, end];
}
