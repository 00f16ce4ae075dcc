// A port for something a test starts later (an app, PostgreSQL, Pebble): taken at random from
// 10000–19999, below the kernel's ephemeral range (32768–60999 here), and checked free by binding
// it. A port from listen(0) is an ephemeral one, which the hundreds of outgoing connections of a
// test running at the same time (the connection-cap floods) may take as their source port before
// the app binds it.

import { createServer } from 'node:net';

const LOW = 10_000;
const SPAN = 10_000;

function tryBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

export async function freePort(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = LOW + Math.floor(Math.random() * SPAN);
    if (await tryBind(port)) return port;
  }
  throw new Error('no free port in 10000-19999');
}
