// The hosting API's services wired together once: accounts, phone verification, servers and
// exposed ports. Built by createHostingApi from its dependencies.

import type { Billing } from '../billing/index.js';
import type { Config } from '../config/index.js';
import type { Paywall } from '../payments/index.js';
import type { Logger } from '../log/index.js';
import type { Presence, Runtime, ServerState } from '../runtime/index.js';
import type { SmsSender } from '../sms/index.js';
import type { AccountRecord, Store } from '../store/index.js';
import { Accounts } from './accounts.js';
import { Exposures, type PortListener } from './expose.js';
import { HostSecret } from './keys.js';
import { PhoneVerifier } from './phone.js';
import { Servers, type Credits, type KeyPair } from './servers.js';

export interface HostingDeps {
  cfg: Readonly<Config>;
  log: Logger;
  store: Store;
  runtime: Runtime;
  presence: Presence;
  sms: SmsSender;
  ports: PortListener;
  makeKeyPair(comment: string): KeyPair;
  billing: Billing;
  /** x402 paywall for recharges; absent or unconfigured → 503 not_configured. */
  paywall?: Paywall;
  /** The SSH port clients should use (the bound port when configured as 0). */
  sshPort(): number;
  stateOf?(serverId: string): ServerState | undefined;
  /** Forgets a deleted server outside the runtime (idle tracking). */
  forget?(serverId: string): void;
}

export interface HostingCore {
  cfg: Readonly<Config>;
  log: Logger;
  store: Store;
  accounts: Accounts;
  phone: PhoneVerifier;
  servers: Servers;
  exposures: Exposures;
  credits(account: AccountRecord): Credits;
  sshPort(): number;
}

export function buildCore(d: HostingDeps): HostingCore {
  const secret = new HostSecret(d.cfg.dataDir);
  const exposures = new Exposures(d.store, d.ports, d.cfg.hosting.portPool, d.cfg.publicIp);
  const servers = new Servers({
    store: d.store,
    runtime: d.runtime,
    log: d.log,
    domain: d.cfg.domain,
    brands: new Set(d.cfg.hosting.brandSlugs),
    maxServersPerAccount: d.cfg.hosting.maxServersPerAccount,
    makeKeyPair: d.makeKeyPair,
    credits: (a) => d.billing.credits(a),
    exposedPorts: (id) => exposures.list(id),
    release: async (id) => {
      await exposures.releaseServer(id);
      d.forget?.(id);
    },
    stateOf: d.stateOf,
  });
  return {
    cfg: d.cfg,
    log: d.log,
    store: d.store,
    accounts: new Accounts(d.store, secret),
    phone: new PhoneVerifier(d.store, secret, d.sms),
    servers,
    exposures,
    credits: (a) => d.billing.credits(a),
    sshPort: d.sshPort,
  };
}
