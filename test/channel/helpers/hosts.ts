// A cluster CA made for one test file and the channel identities of two of its hosts: host-b, the
// sender ("me"), and host-a, the owner it forwards to.

import { issueIdentity, type Identity } from '../../../src/channel/identity.js';
import { createCa } from '../../../src/edge/index.js';
import type { CaPair } from '../../../src/registry/index.js';

export function twoHosts(): { pair: CaPair; me: Identity; owner: Identity } {
  const name = 'rootbox cluster CA';
  const pair: CaPair = { name, ...createCa(name) };
  return { pair, me: issueIdentity(pair, 'host-b'), owner: issueIdentity(pair, 'host-a') };
}
