// The API reference in docs/ as the daemon serves it: a daemon of plain processes (no runc)
// answers /openapi.json on its hosting and verification hosts, and src/http/apidoc.ts writes each
// as Markdown. test/http/apidocs.test.ts compares them with docs/; `npm run docs` writes them:
//   node --import tsx test/helpers/apidocs.ts --write

import { writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { join } from 'node:path';
import { apiMarkdown } from '../../src/http/index.js';
import { startTestDaemon } from './daemon.js';

const repo = new URL('../../', import.meta.url).pathname;

/** docs/ file → its Markdown, as the daemon's documents make it now. */
export const DOC_FILES = { hosting: join(repo, 'docs', 'hosting-api.md'), verify: join(repo, 'docs', 'verify-api.md') };

function fetchDoc(port: number, host: string): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port, path: '/openapi.json', headers: { host } }, (r) => {
      let body = '';
      r.setEncoding('utf8');
      r.on('data', (c: string) => (body += c));
      r.on('end', () => {
        try {
          resolve(JSON.parse(body) as Record<string, unknown>);
        } catch (e) {
          reject(e);
        }
      });
    }).on('error', reject);
  });
}

const HEADER = '<!-- written by `npm run docs` from the OpenAPI document the daemon serves; edit the route declarations, not this file -->\n\n';

export async function servedDocs(): Promise<{ hosting: string; verify: string }> {
  process.env.ROOTBOX_TEST_RUNTIME ??= 'process';
  const d = await startTestDaemon();
  try {
    return {
      hosting: HEADER + apiMarkdown(await fetchDoc(d.http, 'api.localhost')),
      verify: HEADER + apiMarkdown(await fetchDoc(d.http, 'verify.localhost')),
    };
  } finally {
    await d.stop();
  }
}

if (process.argv[1] === new URL(import.meta.url).pathname && process.argv.includes('--write')) {
  const docs = await servedDocs();
  writeFileSync(DOC_FILES.hosting, docs.hosting);
  writeFileSync(DOC_FILES.verify, docs.verify);
  console.log(`wrote ${DOC_FILES.hosting} and ${DOC_FILES.verify}`);
  process.exit(0);
}
