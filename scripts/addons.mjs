// Loads each native addon rootbox uses (the list of src/ops/noderuntime.ts) under the running
// Node; prints one line per addon and exits 1 when one does not load (built for another Node, or
// its install script never ran). scripts/setup rebuilds them when this fails.
import { createRequire } from 'node:module';

const addons = ['lmdb', 'msgpackr-extract', 'node-pty/build/Release/pty.node', 'ssh2/lib/protocol/crypto/build/Release/sshcrypto.node', 'cpu-features'];
const req = createRequire(new URL('../package.json', import.meta.url));
let bad = 0;
for (const a of addons) {
  try {
    req(a);
    console.log(`ok       ${a}`);
  } catch (e) {
    bad++;
    console.log(`FAILED   ${a}: ${String(e.message).split('\n')[0]}`);
  }
}
console.log(`${bad ? bad + ' native addon(s) do not load' : 'every native addon loads'} on Node ${process.version}`);
process.exit(bad ? 1 : 0);
