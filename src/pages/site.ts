// What a visitor of <slug>.{domain} sees when the server's own content does not answer: the page
// of a server that has published nothing yet (how to publish, what sleeps and what comes back),
// and error pages (402 paused, 404, 502/503/504 from its app or its wake), each as HTML for
// browsers and as JSON for agents with the same facts.

import type { Reply } from '../http/index.js';
import { markup, type Html } from './html.js';
import { pageReply } from './layout.js';

export interface SiteLinks {
  /** The host the visitor asked for, as they wrote it (port included). */
  host: string;
  /** Origin of the hosting API (api.{domain}), as clients reach it. */
  api?: string;
}

const STATIC = 'put files in /root/www (an index.html is served at /); they are served at once, even while the server sleeps';
const APP =
  'or make /root/run.sh executable and have it start a server listening on 0.0.0.0:80; it starts within about a second and is restarted when it exits';
const SLEEP =
  'an idle server sleeps: processes started over SSH stop then, and only /root/run.sh is started again when the server wakes (on the next visit or SSH login); files on its disk stay';

const footer = (l: SiteLinks) => (l.api ? markup`Served by rootbox · <a href="${l.api}/">what this host offers</a>` : markup`Served by rootbox.`);

/** The welcome page of a server with nothing published: JSON for agents, HTML for people. */
export function welcomeReply(slug: string, links: SiteLinks, asHtml: boolean): Reply {
  if (!asHtml) {
    return {
      status: 200,
      headers: { 'cache-control': 'no-store', vary: 'Accept' },
      body: {
        server: slug,
        published: false,
        detail: `nothing is published here yet: ${STATIC}; ${APP}`,
        publish: { static_files: '/root/www', app: '/root/run.sh (executable, serving on 0.0.0.0:80)' },
        sleep: SLEEP,
      },
    };
  }
  const main = markup`<h1>${links.host} has nothing published yet</h1>
    <p class="lead">This is a rootbox server. If it is yours, here are the two ways to put a site on this address.</p>
    <div class="card">
      <b>Static files</b>
      <p>
        Copy them to <code>/root/www</code> on the server; an <code>index.html</code> is served at <code>/</code>. They are served at once, even while the
        server sleeps.
      </p>
      <pre><code>scp -P PORT -i ~/.ssh/KEY -r ./site/. root@HOST:/root/www/</code></pre>
      <p class="muted">PORT, KEY and HOST are those of the <code>ssh</code> line you got when the server was created.</p>
    </div>
    <div class="card">
      <b>Your own app</b>
      <p>
        Write an executable <code>/root/run.sh</code> that starts a server listening on <code>0.0.0.0:80</code>. It starts within about a second, is restarted
        when it exits, and this address switches to it.
      </p>
      <pre><code>cat &gt; /root/run.sh &lt;&lt;'EOF'
#!/bin/sh
cd /root/www &amp;&amp; exec python3 -m http.server 80
EOF
chmod +x /root/run.sh</code></pre>
      <p class="muted">Its output goes to <code>/var/log/run.sh.log</code>.</p>
    </div>
    <div class="card note">
      <b>What sleeps and what comes back</b>
      <p>
        An idle server sleeps. Processes you start over SSH stop when it sleeps; only <code>/root/run.sh</code> is started again when the server wakes, on the
        next visit or SSH login. Files on its disk stay.
      </p>
    </div>`;
  return pageReply(200, { title: `${links.host} · nothing published yet`, where: links.host, main, footer: footer(links) });
}

/** The body of an error page below its title, by error code: what a visitor can do, and what the
 *  owner can (with the error's own hint, which is about the owner's server). */
function explain(e: ErrorFacts, links: SiteLinks): Html {
  const { hint, retryAfter } = e;
  const recharge = links.api ? `${links.api}/account/recharge` : undefined;
  switch (e.code) {
    case 'server_suspended':
      if (e.suspendedBy === 'operator') return markup`<div class="card note"><b>If this is your server</b><p>${e.hint} Its files are kept.</p></div>`;
      return markup`<div class="card note">
        <b>If this is your server</b>
        <p>
          It stopped because its account used up its free grant and has no credit. Add
          credit${recharge ? markup` on <a href="${recharge}">the recharge page</a> (you will need the account's api_key)` : ''}, or verify a phone; the server
          starts again at the next billing pass. Its files are kept.
        </p>
      </div>`;
    case 'app_down':
    case 'bad_gateway':
    case 'upstream_timeout':
    case 'wake_timeout':
    case 'wake_failed':
    case 'wake_queue_full':
      return markup`<p>${retryAfter ? `Try again in ${retryAfter} s.` : 'Try again in a moment.'}</p>
        <div class="card note">
          <b>If this is your server</b>
          <p>
            ${hint ?? markup`<code>/root/run.sh</code> must start a server listening on <code>0.0.0.0:80</code>; its output is in <code>/var/log/run.sh.log</code>.`}
          </p>
          <p>Processes started over SSH stop when the server sleeps; only <code>/root/run.sh</code> comes back when it wakes.</p>
        </div>`;
    case 'unknown_server':
      return links.api ? markup`<p>Check the address. <a href="${links.api}/">This host</a> makes servers on demand.</p>` : markup``;
    default:
      return hint ? markup`<p>${hint}</p>` : markup``;
  }
}

export interface ErrorFacts {
  status: number;
  code: string;
  detail: string;
  hint?: string;
  requestId: string;
  retryAfter?: number;
  /** A paused server: who paused it (`billing` or `operator`). */
  suspendedBy?: string;
}

/** The HTML form of an error answer (its JSON form is the APIs' {error, detail, …}). */
export function errorPageReply(e: ErrorFacts, links: SiteLinks, headers: Record<string, string>): Reply {
  const main = markup`<h1>${e.status} · ${e.detail}</h1>
    ${explain(e, links)}
    <p class="muted">error <code>${e.code}</code> · request <code>${e.requestId}</code></p>`;
  return pageReply(e.status, { title: `${e.status} · ${links.host}`, where: links.host, main, footer: footer(links) }, headers);
}
