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
import { cgroupPath } from './spec.js';

/** How long the SIGKILLed init may take to go before runc delete (forced) goes ahead. */
const KILL_WAIT_MS = 5000;

export async function haltContainer(runc: Runc, id: string, graceMs: number): Promise<void> {
  // no grace: the signal is pending when the thaw comes, so no process of it runs another instruction
  if (graceMs <= 0 && isFrozen(cgroupPath(id)) && !(await runc.kill(id, 'KILL', true)) && !killCgroup(cgroupPath(id)))
    throw new InternalError('a frozen server could not be killed; it is left frozen, not thawed', { server: id });
  thaw(cgroupPath(id)); // a dozing server gets its SIGTERM and grace like any other
  const st = await runc.state(id);
  if (st && st.status !== 'stopped' && st.pid > 0) {
    if (graceMs > 0 && st.status === 'running') {
      await runc.kill(id, 'TERM');
      const deadline = Date.now() + graceMs;
      while (Date.now() < deadline && alive(st.pid)) await sleep(10);
    }
    // a created (parked) container's one process is its init: killed alone. --all signals every
    // process of the cgroup, which is named after the server alone (spec.ts cgroupPath): another
    // daemon of the machine running the same server (a move's source, beside the target's parked
    // copy it gave up) would lose its container with it
    if (alive(st.pid)) await runc.kill(id, 'KILL', st.status !== 'created');
    const deadline = Date.now() + KILL_WAIT_MS;
    while (Date.now() < deadline && alive(st.pid)) await sleep(10);
  }
  if (st) await runc.delete(id, true);
  removeCgroup(cgroupPath(id));
}
