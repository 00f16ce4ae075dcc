// The registry's names and placements with each placed server's SSH public key recorded beside
// its placement (what hosting sees as SharedNames in registry mode): the names from names.ts, the
// keys in shared.ts's `server_keys`, its settings (never_sleep, exposed ports) in settings.ts's
// `server_settings`, written off the request path by settingswriter.ts (a failed settings write
// neither fails a create nor holds up an answer: it is kept and written again).

import type { PlaceRequest } from '../placing.js';
import type { RegistryNames } from './names.js';
import type { ServerSettingsRow } from './settings.js';
import type { SettingsWriter } from './settingswriter.js';
import type { RegistryShared } from './shared.js';

/**
 * The registry's names and placements with each placed server's SSH public key recorded beside
 * its placement (what hosting sees as SharedNames in registry mode): place() writes the
 * placement, then the key and its settings; remove() forgets them (names.ts removes the settings).
 */
export function keyedNames(names: RegistryNames, shared: RegistryShared, settings: SettingsWriter) {
  return {
    claim: (slug: string, serverId: string) => names.claim(slug, serverId),
    release: (slug: string, serverId: string) => names.release(slug, serverId),
    /** Also records the keys and settings of the servers placed here (those placed before keys or settings were shared, or changed while the registry was away). */
    async reconcile(
      servers: readonly {
        id: string;
        slug: string;
        accountId: string;
        sshPublicKey?: string;
        keyFingerprint?: string;
        settings?: Omit<ServerSettingsRow, 'serverId'>;
      }[],
      publicIp: string,
      moving?: ReadonlySet<string>,
    ) {
      const r = await names.reconcile(servers, publicIp, moving);
      const away = new Set([...r.elsewhere, ...r.deleted]);
      const taken = new Set(r.conflicts);
      const keys = servers.filter((x) => x.sshPublicKey && x.keyFingerprint && !away.has(x.id) && !taken.has(x.slug));
      await shared.recordKeys(keys.map((x) => ({ serverId: x.id, fingerprint: x.keyFingerprint!, publicKey: x.sshPublicKey! })));
      settings.want(servers.filter((x) => x.settings && !away.has(x.id) && !taken.has(x.slug)).map((x) => ({ serverId: x.id, ...x.settings! })));
      return r;
    },
    async place(p: PlaceRequest) {
      const placed = await names.place({ serverId: p.serverId, accountId: p.accountId, slug: p.slug, publicIp: p.publicIp });
      if (p.sshPublicKey && p.keyFingerprint) await shared.recordKey({ serverId: p.serverId, publicKey: p.sshPublicKey, fingerprint: p.keyFingerprint });
      settings.want([{ serverId: p.serverId, neverSleep: p.neverSleep ?? false, exposed: [] }]);
      return placed;
    },
    /** A server's settings changed here (its exposed ports): written soon where the registry places it here (never waits, never throws). */
    settings: (row: ServerSettingsRow) => settings.want([row]),
    self: names.hostName,
    placementOf: (serverId: string) => names.fenceOf(serverId),
    epochOf: (serverId: string) => names.epochOf(serverId),
    async remove(serverId: string) {
      await names.remove(serverId);
      await shared.removeKey(serverId);
    },
  };
}
