// docs/hosting-api.md and docs/verify-api.md are the API reference as the daemon serves it: the
// Markdown written from each app's OpenAPI document (test/helpers/apidocs.ts). A route, a field
// or an error status changed without `npm run docs` fails here.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { DOC_FILES, servedDocs } from '../helpers/apidocs.js';
import { apiMarkdown } from '../../src/http/index.js';

test('docs/ holds the API reference the daemon serves now (run `npm run docs` after changing a route)', async () => {
  const served = await servedDocs();
  for (const api of ['hosting', 'verify'] as const) {
    const kept = readFileSync(DOC_FILES[api], 'utf8');
    assert.ok(kept === served[api], `${DOC_FILES[api]} is not what the daemon serves: run npm run docs`);
  }
});

test('the reference names every operation with its answers, and the fields of every schema', () => {
  const doc = {
    info: { title: 'T', description: 'd' },
    paths: {
      '/x/{id}': {
        post: {
          summary: 'Do x',
          security: [{ bearer: [] }],
          parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' }, description: 'the id' }],
          requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/XRequest' } } } },
          responses: { 200: { description: 'done' }, 500: { $ref: '#/components/responses/Oops' } },
        },
      },
    },
    components: {
      responses: { Oops: { description: 'it broke' } },
      schemas: { XRequest: { type: 'object', properties: { n: { type: ['integer', 'null'], description: 'how many' } }, required: ['n'] } },
    },
  };
  const md = apiMarkdown(doc);
  assert.match(md, '| [POST /x/{id}](#post-xid) | Do x |');
  assert.match(md, 'Authorization: `Bearer <api_key>`.');
  assert.match(md, '| `id` | path | string | yes | the id |');
  assert.match(md, 'Body (application/json): [XRequest](#xrequest)');
  assert.match(md, '| 500 | it broke |');
  assert.match(md, '| `n` | integer \\| null | yes | how many |');
});

test.run();
