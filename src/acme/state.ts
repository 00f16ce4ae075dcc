// The host certificate's state file (<dataDir>/acme/state.json), written by the daemon and read
// by `rootbox doctor` and a stopped daemon's `rootbox status`.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { HostCertState } from './host.js';

export const acmeStateFile = (dataDir: string) => join(dataDir, 'acme', 'state.json');

export function readAcmeState(dataDir: string): (HostCertState & { written_at?: string }) | undefined {
  try {
    return JSON.parse(readFileSync(acmeStateFile(dataDir), 'utf8'));
  } catch {
    return undefined;
  }
}

export type AcmeFacts =
  { configured: false } | ({ configured: true; directory: string } & Partial<HostCertState> & { state: HostCertState['state']; written_at?: string });

/** The host certificate's ACME state for `rootbox status` (days_left as of now). */
export function acmeFacts(cfg: { dataDir: string; https: { acme: { directory?: string } } }, now = Date.now()): AcmeFacts {
  const directory = cfg.https.acme.directory;
  if (!directory) return { configured: false };
  const s = readAcmeState(cfg.dataDir);
  if (!s) return { configured: true, directory, state: 'pending' };
  const days_left = s.not_after ? Math.floor((Date.parse(s.not_after) - now) / 86_400_000) : null;
  return { configured: true, directory, ...s, days_left };
}
