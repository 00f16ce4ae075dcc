// Commands running per server when no SSH server shares its count (a daemon without the SSH part,
// the fast test tier): the same ceiling as ssh.maxExecsPerServer, counted for HTTP commands alone.

export class CommandBudget {
  private readonly running = new Map<string, number>();

  constructor(private readonly max: number) {}

  /** A release function, or the sentence saying the server runs its maximum. */
  take(serverId: string): (() => void) | string {
    const n = this.running.get(serverId) ?? 0;
    if (n >= this.max) return `too many commands running on this server (limit ${this.max}); wait for one to end`;
    this.running.set(serverId, n + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.running.get(serverId) ?? 1) - 1;
      if (left > 0) this.running.set(serverId, left);
      else this.running.delete(serverId);
    };
  }
}
