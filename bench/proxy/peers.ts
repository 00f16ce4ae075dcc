// The peer reverse proxies of bench/proxy (run.ts): nginx (also the app when none is given),
// Caddy and HAProxy (Debian packages, scripts/setup's test packages), each the same keep-alive
// reverse proxy to the app (Host kept, X-Forwarded-* set, up to 64 kept-alive upstream
// connections) on one core (run.ts pins it; nginx one worker, Caddy GOMAXPROCS=1, HAProxy
// nbthread 1), plain and over TLS with the throwaway certificate made here.

import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface Peer {
  name: string;
  port: number;
  tlsPort: number;
  pid: number;
}

type Run = (cmd: string, args: string[]) => Promise<string>;
type Pinned = (cmd: string, args: string[]) => [string, string[]];

/** An nginx with `server` in its http block; `pinned` wraps the command (taskset). */
export function nginxWith(dir: string, name: string, workers: string, server: string, pinned: Pinned): ChildProcess {
  const prefix = join(dir, name);
  const conf = `worker_processes ${workers};
pid ${prefix}.pid;
error_log ${prefix}.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/${name}-body;
  proxy_temp_path ${dir}/${name}-proxy;
  ${server}
}
`;
  writeFileSync(`${prefix}.conf`, conf);
  return spawn(...pinned('nginx', ['-c', `${prefix}.conf`, '-p', dir, '-g', 'daemon off;']), { stdio: ['ignore', 'ignore', 'inherit'] });
}

/** nginx's keep-alive reverse proxy to `target` on `listen` (with " ssl": over TLS with the certificate below). */
export function nginxProxyServer(dir: string, target: string, listen: string): string {
  const cert = listen.endsWith(' ssl') ? ` ssl_certificate ${dir}/c.pem; ssl_certificate_key ${dir}/k.pem;` : '';
  return `upstream app { server ${target}; keepalive 64; keepalive_requests 100000; }
  server { listen ${listen};${cert} keepalive_requests 100000;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host $host; proxy_set_header X-Forwarded-For $remote_addr; proxy_set_header X-Forwarded-Proto $scheme; proxy_set_header X-Forwarded-Host $host; } }`;
}

/** A self-signed P-256 certificate for bench.rbx.test and 127.0.0.1: dir/c.pem, dir/k.pem and both in dir/ck.pem (HAProxy). */
export async function certificate(dir: string, run: Run): Promise<void> {
  const [k, c] = [join(dir, 'k.pem'), join(dir, 'c.pem')];
  const subj = ['-subj', '/CN=bench.rbx.test', '-addext', 'subjectAltName=DNS:bench.rbx.test,IP:127.0.0.1'];
  await run('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', k, '-out', c, '-days', '1', ...subj]);
  writeFileSync(join(dir, 'ck.pem'), readFileSync(c, 'latin1') + readFileSync(k, 'latin1'));
}

/** Caddy: one site plain, one over TLS, both proxying to `target` with up to 64 idle upstream connections. */
export function caddy(dir: string, target: string, port: number, tlsPort: number, pinned: Pinned): { child: ChildProcess; peer: Peer } {
  const proxy = `reverse_proxy ${target} {
    transport http {
      keepalive 2m
      keepalive_idle_conns 64
      keepalive_idle_conns_per_host 64
    }
  }`;
  const conf = `{
  admin off
  auto_https off
  default_sni bench.rbx.test
  storage file_system ${dir}/caddy-data
}
http://:${port} {
  bind 127.0.0.1
  ${proxy}
}
https://:${tlsPort} {
  bind 127.0.0.1
  tls ${dir}/c.pem ${dir}/k.pem
  ${proxy}
}
`;
  writeFileSync(join(dir, 'Caddyfile'), conf);
  const env = { ...process.env, GOMAXPROCS: '1', HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir };
  const child = spawn(...pinned('caddy', ['run', '--adapter', 'caddyfile', '--config', join(dir, 'Caddyfile')]), {
    stdio: ['ignore', 'ignore', 'ignore'],
    env,
  });
  return { child, peer: { name: 'caddy', port, tlsPort, pid: child.pid! } };
}

/** HAProxy: one frontend with a plain and a TLS bind, one backend reusing its connections to `target`. */
export function haproxy(dir: string, target: string, port: number, tlsPort: number, pinned: Pinned): { child: ChildProcess; peer: Peer } {
  const conf = `global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
frontend bench
  bind 127.0.0.1:${port}
  bind 127.0.0.1:${tlsPort} ssl crt ${dir}/ck.pem
  option forwardfor
  http-request set-header X-Forwarded-Proto https if { ssl_fc }
  http-request set-header X-Forwarded-Proto http if !{ ssl_fc }
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  default_backend app
backend app
  http-reuse always
  server app ${target} pool-max-conn 64
`;
  writeFileSync(join(dir, 'haproxy.cfg'), conf);
  const child = spawn(...pinned('haproxy', ['-db', '-f', join(dir, 'haproxy.cfg')]), { stdio: ['ignore', 'ignore', 'inherit'] });
  return { child, peer: { name: 'haproxy', port, tlsPort, pid: child.pid! } };
}
