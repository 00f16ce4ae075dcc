#!/usr/bin/env node
// Load generator run in its own process (so it does not share the daemon's event loop): keeps
// `concurrency` keep-alive requests in flight for `ms` milliseconds and prints JSON
// {requests, perSecond, statuses}.
// Usage: node load.mjs <port> <host> <method> <path> <body|-> <concurrency> <ms>

import { Agent, request } from 'node:http';

const [port, host, method, path, bodyArg, conc, ms] = process.argv.slice(2);
const body = bodyArg === '-' ? undefined : bodyArg;
const agent = new Agent({ keepAlive: true, maxSockets: Number(conc) });
const statuses = {};
let done = 0;
const end = Date.now() + Number(ms);

function one() {
  return new Promise((resolve) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: Number(port),
        method,
        path,
        agent,
        headers: { host, ...(body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {}) },
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
          resolve();
        });
      },
    );
    req.on('error', () => {
      statuses.error = (statuses.error ?? 0) + 1;
      resolve();
    });
    req.end(body);
  });
}

const started = Date.now();
await Promise.all(
  Array.from({ length: Number(conc) }, async () => {
    while (Date.now() < end) {
      await one();
      done++;
    }
  }),
);
const secs = (Date.now() - started) / 1000;
agent.destroy();
process.stdout.write(JSON.stringify({ requests: done, perSecond: Math.round(done / secs), statuses }) + '\n');
