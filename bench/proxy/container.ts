// Benchmark helper process for `bench/proxy/run.ts --container`: the issue's own setup. A real
// daemon (test daemon: its own bridge, subnet and data dir) with one server whose /root/run.sh
// runs nginx — the host's binary, copied in (the image has the libraries it needs, and no web
// server of its own) — answering a 1 KiB page on port 80 inside a real runc container. Prints
// {"http", "https", "target": "<container ip>:80", "host": "<slug>.localhost"} when the app
// answers, and deletes everything on SIGTERM.

import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { startTestDaemon } from '../../test/helpers/daemon.js';
import { sh } from '../../test/runtime/helpers/env.js';

const PAGE = 'x'.repeat(1024);
const CONF = `worker_processes 1;
user root;
pid /root/ngx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path /root/ngx/body; proxy_temp_path /root/ngx/proxy; fastcgi_temp_path /root/ngx/fcgi;
  uwsgi_temp_path /root/ngx/uwsgi; scgi_temp_path /root/ngx/scgi;
  server { listen 80; keepalive_requests 100000; location / { default_type text/html; return 200 "${PAGE}"; } }
}
`;
const RUN_SH = `#!/bin/sh
exec /root/ngx/nginx -p /root/ngx -c /root/ngx/nginx.conf -e stderr -g 'daemon off;'
`;

function status(host: string, port: number, hostHeader: string): Promise<number> {
  return new Promise((resolve) => {
    const r = request({ host, port, path: '/', headers: { host: hostHeader }, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    r.on('error', () => resolve(0));
    r.end();
  });
}

// ROOTBOX_PROXY_LANE=off measures the daemon without its HTTP/1.1 lane (the A/B the lane is kept on)
const lane = process.env.ROOTBOX_PROXY_LANE;
const d = await startTestDaemon({ publicIp: '127.0.0.1', log: { level: 'warn' }, proxy: { idleTimeout: '1h', ...(lane ? { lane } : {}) } });
const stop = async () => {
  await d.stop();
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());

const created = await new Promise<{ id: string }>((resolve, reject) => {
  const r = request({ host: '127.0.0.1', port: d.http, path: '/create', method: 'POST', headers: { host: 'api.localhost' } }, (res) => {
    let b = '';
    res.on('data', (c) => (b += c));
    res.on('end', () => (res.statusCode === 201 || res.statusCode === 200 ? resolve(JSON.parse(b)) : reject(new Error(`create: ${res.statusCode} ${b}`))));
  });
  r.on('error', reject);
  r.end();
});
const rt = d.daemon.runtime;
const slug = d.daemon.store.servers.get(created.id)!.slug;
const steps: Array<[string, string | Buffer | undefined]> = [
  ['mkdir -p /root/ngx && cat > /root/ngx/nginx && chmod 755 /root/ngx/nginx', readFileSync('/usr/sbin/nginx')],
  ['cat > /root/ngx/nginx.conf', CONF],
  ['cat > /root/run.sh && chmod 755 /root/run.sh', RUN_SH],
];
for (const [script, input] of steps) {
  const r = await sh(rt, created.id, script, input);
  if (r.code !== 0) throw new Error(`${script}: ${r.err}`);
}
const ip = rt.get(created.id)!.ip;
const host = `${slug}.localhost`;
for (let i = 0; ; i++) {
  if ((await status(ip, 80, host)) === 200 && (await status('127.0.0.1', d.http, host)) === 200) break;
  if (i > 200) throw new Error('nginx in the container did not answer within 20 s');
  await new Promise((r) => setTimeout(r, 100));
}
process.stdout.write(JSON.stringify({ http: d.http, https: d.https, target: `${ip}:80`, host }) + '\n');
