// The stop of a server's container: SIGTERM, up to a grace, SIGKILL to everything (to its init
// alone for a created — parked — container: nothing else of it runs), runc delete and the cgroup
// removed when empty. A dozing (frozen, freezer.ts) server is thawed first so it gets its
// SIGTERM and grace like any other; without a grace, a frozen server is SIGKILLed while still
// frozen and only then thawed, so it dies without running again (the self-fence froze it so that
// it would neither write nor answer: registry/selffence.ts) — runc's SIGKILL, else one sent through
// the cgroup (cgroup.ts); when neither could be sent it is left frozen and the stop fails. The namespaces and veth stay (network.ts; the next start
// joins them, the runtime's teardown releases them); parking state is the runtime's (park.ts).

import { InternalError } from '../errors.js';
import { killCgroup, removeCgroup } from './cgroup.js';
import { isFrozen, thaw } from './freezer.js';
import { alive, sleep } from './proc.js';
import type { Runc } from './runc.js';

/** How long the SIGKILLed init may take to go before runc delete (forced) goes ahead. */
const KILL_WAIT_MS = 5000;

/** Stops container `id`, whose cgroup is `cgroup` (spec.ts cgroupPath: this daemon's own). */
export async function haltContainer(runc: Runc, id: string, cgroup: string, graceMs: number): Promise<void> {
  // no grace: the signal is pending when the thaw comes, so no process of it runs another instruction
  if (graceMs <= 0 && isFrozen(cgroup) && !(await runc.kill(id, 'KILL', true)) && !killCgroup(cgroup))
    throw new InternalError('a frozen server could not be killed; it is left frozen, not thawed', { server: id });
  thaw(cgroup); // a dozing server gets its SIGTERM and grace like any other
  const st = await runc.state(id);
  if (st && st.status !== 'stopped' && st.pid > 0) {
    if (graceMs > 0 && st.status === 'running') {
      await runc.kill(id, 'TERM');
      const deadline = Date.now() + graceMs;
      while (Date.now() < deadline && alive(st.pid)) await sleep(10);
    }
    // a created (parked) container's one process is its init: killed alone (nothing else of it
    // runs); a running one's every process of its cgroup, this daemon's own (spec.ts cgroupPath)
    if (alive(st.pid)) await runc.kill(id, 'KILL', st.status !== 'created');
    const deadline = Date.now() + KILL_WAIT_MS;
    while (Date.now() < deadline && alive(st.pid)) await sleep(10);
  }
  if (st) await runc.delete(id, true);
  removeCgroup(cgroup);
}
