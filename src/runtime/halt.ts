// The stop of a server's container: SIGTERM, up to a grace, SIGKILL to everything, runc delete
// and the cgroup removed. A dozing (frozen, freezer.ts) server is thawed first so it gets its
// SIGTERM and grace like any other. The namespaces and veth stay (network.ts; the next start
// joins them, the runtime's teardown releases them); parking state is the runtime's (park.ts).

import { removeCgroup } from './cgroup.js';
import { thaw } from './freezer.js';
import { alive, sleep } from './proc.js';
import type { Runc } from './runc.js';
import { cgroupPath } from './spec.js';

/** How long the SIGKILLed init may take to go before runc delete (forced) goes ahead. */
const KILL_WAIT_MS = 5000;

export async function haltContainer(runc: Runc, id: string, graceMs: number): Promise<void> {
  thaw(cgroupPath(id)); // a dozing server gets its SIGTERM and grace like any other
  const st = await runc.state(id);
  if (st && st.status !== 'stopped' && st.pid > 0) {
    if (graceMs > 0 && st.status === 'running') {
      await runc.kill(id, 'TERM');
      const deadline = Date.now() + graceMs;
      while (Date.now() < deadline && alive(st.pid)) await sleep(10);
    }
    if (alive(st.pid)) await runc.kill(id, 'KILL', true);
    const deadline = Date.now() + KILL_WAIT_MS;
    while (Date.now() < deadline && alive(st.pid)) await sleep(10);
  }
  if (st) await runc.delete(id, true);
  removeCgroup(cgroupPath(id));
}
