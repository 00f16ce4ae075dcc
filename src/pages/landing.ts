// The apex page ({domain}/ and api.{domain}/): what this host offers, the one curl line that
// creates a server, and where the API description and the verification service are — as HTML
// for people and as JSON for agents, from the same facts.

import type { Reply } from '../http/index.js';
import { markup } from './html.js';
import { pageReply } from './layout.js';

export interface LandingFacts {
  domain: string;
  /** Origin of the hosting API (api.{domain}) and of the verification service (verify.{domain}). */
  api: string;
  verify: string;
  prices: { ramUsdPerGbHour: number; diskUsdPerGbMonth: number; egressUsdPerGb: number };
  grant: { ramGbHours: number; egressGb: number; verifiedRamGbHours: number; verifiedEgressGb: number };
}

const ABOUT =
  'Root Linux servers on demand: each is a full Debian machine you log into as root over SSH, with its own HTTPS address <slug>.{domain}. Idle servers sleep and wake on the next visit or SSH login; usage is paid from a free grant, then from credit.';

export function landingInfo(f: LandingFacts) {
  return {
    service: 'rootbox',
    domain: f.domain,
    about: ABOUT.replace('{domain}', f.domain),
    create: { method: 'POST' as const, url: `${f.api}/create`, curl: `curl -X POST ${f.api}/create` },
    openapi: `${f.api}/openapi.json`,
    mcp: `${f.api}/mcp`,
    recharge: `${f.api}/account/recharge`,
    feedback: `${f.api}/feedback`,
    over_https: {
      exec: `POST ${f.api}/servers/{id}/exec {"command": "uname -a"} → {exit_code, stdout, stderr}; Accept: application/x-ndjson streams`,
      files: `${f.api}/servers/{id}/files?path=/abs/path (GET with Range, list=1, archive=1; PUT raw body; DELETE); POST …/files/archive?path=/dir unpacks a tar`,
    },
    verify: { info: `${f.verify}/v1/info`, openapi: `${f.verify}/openapi.json` },
    prices: { ram_usd_per_gb_hour: f.prices.ramUsdPerGbHour, disk_usd_per_gb_month: f.prices.diskUsdPerGbMonth, egress_usd_per_gb: f.prices.egressUsdPerGb },
    free_grant: {
      anonymous: { ram_gb_hours: f.grant.ramGbHours, egress_gb: f.grant.egressGb },
      verified_phone: { ram_gb_hours: f.grant.verifiedRamGbHours, egress_gb: f.grant.verifiedEgressGb },
    },
  };
}

export function landingReply(f: LandingFacts): Reply {
  const i = landingInfo(f);
  const main = markup`<h1>Root Linux servers on demand</h1>
    <p class="lead">
      Each server is a full Debian machine: you are root, log in over SSH, and it has its own HTTPS address <code>&lt;name&gt;.${f.domain}</code>. Idle servers
      sleep and wake on the next visit or SSH login.
    </p>
    <h2>Create a server</h2>
    <pre><code>${i.create.curl}</code></pre>
    <p>
      No sign-up: the answer holds your <code>api_key</code>, the server's address, an <code>ssh</code> line and the private key it names (shown once). Save the
      key with <code>chmod 600</code> and run the <code>ssh</code> line.
    </p>
    <h2>No SSH client? Use HTTPS</h2>
    <p>With the same <code>api_key</code> (<code>Authorization: Bearer …</code>), confined exactly like SSH, waking a sleeping server:</p>
    <ul>
      <li><code>POST /servers/{id}/exec</code> with <code>{"command": "uname -a"}</code> answers exit code, stdout and stderr; with <code>Accept: application/x-ndjson</code> the output streams.</li>
      <li><code>GET</code>, <code>PUT</code>, <code>DELETE /servers/{id}/files?path=/abs/path</code> read (Range), write and delete files; <code>list=1</code> lists a directory, <code>archive=1</code> downloads it as a tar, <code>POST /servers/{id}/files/archive?path=/dir</code> unpacks one.</li>
    </ul>
    <h2>Publish a site</h2>
    <ul>
      <li>Put files in <code>/root/www</code>: they are served at once, even while the server sleeps.</li>
      <li>
        Or make <code>/root/run.sh</code> executable and have it start a server on port 80: it starts in about a second and comes back after every sleep.
        Processes started over SSH stop when the server sleeps; only <code>run.sh</code> comes back.
      </li>
    </ul>
    <h2>What it costs</h2>
    <p>
      A free grant first: ${f.grant.ramGbHours} GB-hours of RAM and ${f.grant.egressGb} GB of traffic (${f.grant.verifiedRamGbHours} GB-hours and
      ${f.grant.verifiedEgressGb} GB with a verified phone). Then from your balance: $${f.prices.ramUsdPerGbHour} per GB-hour of RAM while awake,
      $${f.prices.diskUsdPerGbMonth} per GB-month of disk, $${f.prices.egressUsdPerGb} per GB of traffic. <a href="${i.recharge}">Add credit</a>.
    </p>
    <h2>For programs and agents</h2>
    <ul>
      <li>API description (OpenAPI 3.1): <a href="${i.openapi}">${i.openapi}</a></li>
      <li>
        MCP server (Streamable HTTP) for agents: <code>${i.mcp}</code> — every API action as a tool (create_server, exec, read_file,
        write_file …) with <code>Authorization: Bearer &lt;api_key&gt;</code>; without a key it offers create_server.
      </li>
      <li>
        Verification service (judges a text against a rubric with independent AI passes, paid per call with x402):
        <a href="${i.verify.info}">${i.verify.info}</a> · <a href="${i.verify.openapi}">OpenAPI</a>
      </li>
      <li>This page as JSON: ask with <code>Accept: application/json</code>.</li>
    </ul>`;
  return pageReply(200, {
    title: `rootbox · ${f.domain}`,
    where: f.domain,
    main,
    footer: markup`Served by rootbox on ${f.domain} · feedback: <code>POST ${i.feedback}</code>`,
  });
}
