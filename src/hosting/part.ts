// The daemon's hosting part (main.ts's startHosting): the hosting API made over the parts before
// it (the SMS sender from hosting.sms, the payments' paywall, the SSH server's port and command
// slots, the proxy's forget), then started: it registers itself as billing's tier keeper, reopens
// exposed ports and applies tiers.

import type { Paywall } from '../payments/index.js';
import { createSmsSender } from '../sms/index.js';
import type { HostingDeps } from './core.js';
import { createHostingService, type HostingApi } from './service.js';

/** The daemon's hosting part (main.ts): the API over the parts before it; it registers itself as billing's tier keeper, reopens exposed ports and applies tiers. */
export async function startHosting(
  d: Omit<HostingDeps, 'sms' | 'paywall' | 'sshPort' | 'forget' | 'serverSlot'> & {
    payments: { paywall: Paywall };
    ssh: { port: number; takeServerSlot(serverId: string): (() => void) | string };
    proxy: { forget(id: string): void };
  },
): Promise<HostingApi> {
  const log = d.log.child({ part: 'hosting' });
  const hosting = createHostingService({
    ...d,
    log,
    sms: createSmsSender(d.cfg.hosting.sms, d.log.child({ part: 'sms' })),
    paywall: d.payments.paywall,
    sshPort: () => d.ssh.port || d.cfg.ssh.port,
    serverSlot: (id) => d.ssh.takeServerSlot(id),
    forget: (id) => d.proxy.forget(id),
  });
  await hosting.core.start();
  return hosting;
}
