// The frame every page shares: one small inline stylesheet (no external assets), a header with
// the host's name, a footer, and the answer's headers — a Content-Security-Policy that allows
// only this stylesheet and the page's own inline script (by hash), same-origin fetches, no
// frames, no forms posting elsewhere.

import { createHash } from 'node:crypto';
import type { Reply } from '../http/index.js';
import { markup, trusted, type Html } from './html.js';

const CSS = `*{box-sizing:border-box}
body{margin:0;background:#f5f6f8;color:#1d2330;font:16px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
.w{max-width:46rem;margin:0 auto;padding:0 1.25rem}
header{background:#16213a;color:#fff}
header .w{display:flex;align-items:baseline;gap:.75rem;padding-top:.8rem;padding-bottom:.8rem}
header b{font-size:1.05rem;letter-spacing:.02em}
header span{color:#aab4c8;font-size:.9rem}
main.w{padding-top:2.2rem;padding-bottom:1rem}
h1{font-size:1.65rem;line-height:1.25;margin:0 0 .8rem}
h2{font-size:1.15rem;margin:2rem 0 .5rem}
p,ul,ol{margin:.6rem 0}
li{margin:.3rem 0}
.lead{font-size:1.08rem;color:#3a4253}
a{color:#1b5fd1}
code{font:.9em/1.4 ui-monospace,"DejaVu Sans Mono",Menlo,monospace;background:#e9ecf1;padding:.1em .35em;border-radius:4px;overflow-wrap:anywhere}
pre{background:#111a2e;color:#e3e8f2;padding:.85rem 1rem;border-radius:8px;overflow-x:auto;font:.88rem/1.5 ui-monospace,"DejaVu Sans Mono",Menlo,monospace}
pre code{background:none;padding:0;color:inherit;font:inherit}
.card{background:#fff;border:1px solid #e0e4ea;border-radius:10px;padding:.9rem 1.2rem;margin:1rem 0}
.note{border-left:4px solid #e5a50a}
.bad{border-left:4px solid #d23f3f}
.muted{color:#687086}
table{border-collapse:collapse;margin:.4rem 0}
th,td{text-align:left;padding:.25rem 1.2rem .25rem 0;vertical-align:top}
th{font-weight:600;color:#3a4253}
label{display:block;font-weight:600;margin:.6rem 0 .25rem}
input{display:block;font:inherit;padding:.45rem .6rem;border:1px solid #c3c9d3;border-radius:6px;width:100%;max-width:28rem;background:#fff}
button{font:inherit;padding:.45rem .95rem;border:1px solid #1b5fd1;border-radius:6px;background:#1b5fd1;color:#fff;cursor:pointer;margin-top:.6rem}
.out{margin-top:.8rem}
footer{color:#687086;font-size:.85rem;border-top:1px solid #e0e4ea;margin-top:2.5rem;padding:1rem 0 2rem}`;

const sha256 = (s: string) => `'sha256-${createHash('sha256').update(s).digest('base64')}'`;
const CSS_HASH = sha256(CSS);

export interface PageSpec {
  title: string;
  /** Shown in the header beside the product name (the host the visitor asked for). */
  where: string;
  main: Html;
  footer?: Html;
  /** An inline script of the page's own (a constant, never built from request data). */
  script?: string;
}

/** A complete HTML answer: document, Content-Security-Policy and the usual page headers. */
export function pageReply(status: number, spec: PageSpec, headers: Record<string, string> = {}): Reply {
  const doc = markup`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${spec.title}</title>
<style>${trusted(CSS)}</style>
</head><body>
<header><div class="w"><b>rootbox</b><span>${spec.where}</span></div></header>
<main class="w">
${spec.main}
<footer>${spec.footer ?? markup`Served by rootbox.`}</footer>
</main>${spec.script ? markup`\n<script>${trusted(spec.script)}</script>` : ''}
</body></html>
`;
  const csp = [
    "default-src 'none'",
    `style-src ${CSS_HASH}`,
    ...(spec.script ? [`script-src ${sha256(spec.script)}`, "connect-src 'self'"] : []),
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return {
    status,
    headers: {
      'cache-control': 'no-store',
      vary: 'Accept',
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      'content-security-policy': csp,
      ...headers,
      'content-type': 'text/html; charset=utf-8',
    },
    body: doc.value,
  };
}
