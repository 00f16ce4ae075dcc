// The two DNS-01 publishers behind DnsPublisher: RFC 2136 (signed updates to the zone's primary)
// and an exec hook (`<command> present|cleanup <name> <value>`, run through /bin/sh so the
// command may carry arguments; any DNS provider's CLI can sit behind it). Both wait on the zone's
// authoritative servers.

import { waitForTxt } from './propagation.js';
import { Rfc2136, type Rfc2136Settings } from './rfc2136.js';

export interface DnsPublisher {
  /** Adds `value` to the TXT records of `name` (other values stay). */
  present(name: string, value: string): Promise<void>;
  /** Resolves once every authoritative server of the zone (found from `domain` up) answers `value` for `name`. */
  propagated(name: string, value: string, domain: string): Promise<void>;
  /** Removes that one value again. */
  cleanup(name: string, value: string): Promise<void>;
}

/** Runs a host command (the daemon passes the runtime's runner: child processes live there). */
export type RunCommand = (cmd: string, args: string[], opts: { timeoutMs: number }) => Promise<unknown>;

export interface WaitSettings {
  resolver?: string;
  timeoutMs: number;
}

export function rfc2136Publisher(s: Rfc2136Settings, wait: WaitSettings): DnsPublisher {
  const dns = new Rfc2136(s);
  return {
    present: (name, value) => dns.update('add', name, value),
    cleanup: (name, value) => dns.update('delete', name, value),
    propagated: async (name, value, domain) => void (await waitForTxt(name, value, domain, { resolver: wait.resolver ?? s.server, timeoutMs: wait.timeoutMs })),
  };
}

export function execPublisher(command: string, run: RunCommand, wait: WaitSettings): DnsPublisher {
  const hook = async (op: 'present' | 'cleanup', name: string, value: string) => {
    try {
      await run('/bin/sh', ['-c', `${command} "$@"`, 'rootbox-acme-hook', op, name, value], { timeoutMs: 120_000 });
    } catch {
      // the command's output and path are the operator's, logged by the caller's reason only as this sentence
      throw new Error(`the DNS hook (https.acme.dns.exec.command) failed for "${op} ${name}"`);
    }
  };
  return {
    present: (name, value) => hook('present', name, value),
    cleanup: (name, value) => hook('cleanup', name, value),
    propagated: async (name, value, domain) => void (await waitForTxt(name, value, domain, { resolver: wait.resolver, timeoutMs: wait.timeoutMs })),
  };
}
