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
