// Public surface of the operator's tooling: `rootbox doctor` (the host's checks), `rootbox install`
// / `uninstall`, the Node runtime and native addons they report on, and `rootbox image`. None of it
// runs in the daemon; the runtime (containers, disks, network, images) never imports it.
export { formatChecks, type Check } from './checks.js';
export { hostChecks, runDoctor, acmeCheck, keptAsideCheck } from './doctor.js';
export { installCommand } from './installcli.js';
export { choosePorts, listeningPorts } from './ports.js';
export { imageCommand } from './imagecli.js';
export { ADDONS, NODE_LTS_MAJOR, nodeRuntimeCheck } from './noderuntime.js';
