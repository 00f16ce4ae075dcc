// When a host counts as dead, so that its servers may be recovered on the others (issue 38, DESIGN
// part 7), and when a host must fence itself so that it never is recovered while it still runs
// them. Pure: the times are given, nothing is read here (contact.ts keeps them, selffence.ts acts).
//
// A host is dead only when its lease has lapsed for `recoverAfter` AND no peer has reached it over
// the channel for as long: a host cut off from the registry alone still answers its peers, keeps
// its servers and is still forwarded to (hostsview.ts: down is no lease and no answer on the
// channel — dead is down for `recoverAfter`). A lease that lapsed while the judging host itself
// could not reach the registry is no lapse (leases.ts excuses it): the caller gives no lapse then.
// `recoverAfter` 0 means never automatically (the operator recovers a host by hand).
//
// The other side of the same bound: a host out of contact cannot tell a partition of its own
// from everyone else's death, and the others may recover its servers once `recoverAfter` has
// passed. It freezes its running servers after a quarter of `recoverAfter` out of contact (no
// writes, no answers that diverge from what a recovered copy would give) and stops them after half
// (nothing runs even if this daemon dies meanwhile). The others count `recoverAfter` from the
// lapse of its lease, which comes after its last heartbeat, and from the last time any host that
// reaches the registry reported hearing it: so the stop leaves at least half of `recoverAfter`
// for the stop itself (its grace), timers firing late and detection lag.
//
// Contact (contact.ts keeps the times) is what keeps the others from counting this host dead,
// and nothing else:
//   - this host reaching the registry (its heartbeat renews its lease);
//   - a peer that answers it on the channel and itself reached the registry having heard it (the
//     peer's word, carried in its answer: its heartbeat told the registry this host is reached, so
//     no host counts it dead) — one hop only: a peer that merely hears another such peer vouches
//     for nothing, its reports never reach the registry. A peer cut off from the registry too is
//     no contact: in a split {registry, A} | {B, C}, B and C answer each other yet fence, while A
//     waits `recoverAfter` and recovers their servers;
//   - a registry outage everyone sees: every other host whose lease runs or is excused (it was up
//     when this host last read the registry; only such a host could count this one dead and
//     recover it) answers it at once. Nobody who could recover its servers is out of its sight,
//     and none of them reaches the registry either (else it would vouch), so it keeps serving, as
//     DESIGN part 6 wants of registry trouble. Should one of them stop answering, this host counts
//     from the last moment it heard them all.
// Left open by this rule: a host that was down (or unknown) when this host last read the registry
// and comes back on the registry's side of a partition that cut off every other host; it would
// count this host dead `recoverAfter` after its own start.
// A host that knows no other host has nobody to be recovered by (a registry outage of a lone
// host): it keeps serving.

/** What the judging host knows of another host, in milliseconds. */
export interface HostContact {
  /** How long its lease has been lapsed (not excused by the judge's own registry trouble); undefined: its lease runs. */
  leaseLapsedForMs: number | undefined;
  /** How long since a peer last reached it over the channel (undefined: one answers now). */
  silentForMs: number | undefined;
}

export type Verdict =
  | { dead: true }
  /** Not dead: why, and in how long it would be at the earliest if nothing changes (undefined: not while it answers or its lease runs). */
  | { dead: false; why: 'never' | 'lease' | 'channel' | 'waiting'; inMs?: number };

/** Whether `c`'s host is dead by `recoverAfterMs` (0: never automatically). */
export function verdict(c: HostContact, recoverAfterMs: number): Verdict {
  if (recoverAfterMs <= 0) return { dead: false, why: 'never' };
  if (c.leaseLapsedForMs === undefined) return { dead: false, why: 'lease' };
  if (c.silentForMs === undefined) return { dead: false, why: 'channel' };
  const waited = Math.min(c.leaseLapsedForMs, c.silentForMs);
  if (waited >= recoverAfterMs) return { dead: true };
  return { dead: false, why: 'waiting', inMs: recoverAfterMs - waited };
}

/** What a host cut off from the registry and from every peer does with its running servers. */
export type FenceStep = 'serve' | 'freeze' | 'stop';

/** The self-fence's bounds: frozen after a quarter of `recoverAfter` cut off, stopped after half. */
export function fenceBounds(recoverAfterMs: number): { freezeMs: number; stopMs: number } {
  return { freezeMs: Math.floor(recoverAfterMs / 4), stopMs: Math.floor(recoverAfterMs / 2) };
}

/** The step for a host out of contact for `cutOffForMs` (undefined: in contact now); `knowsPeers`: whether any other host was known to it (none: nobody would recover it). */
export function fenceStep(cutOffForMs: number | undefined, recoverAfterMs: number, knowsPeers: boolean): FenceStep {
  if (cutOffForMs === undefined || recoverAfterMs <= 0 || !knowsPeers) return 'serve';
  const b = fenceBounds(recoverAfterMs);
  if (cutOffForMs >= b.stopMs) return 'stop';
  if (cutOffForMs >= b.freezeMs) return 'freeze';
  return 'serve';
}
