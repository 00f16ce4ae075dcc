// Counts of things held at once, with ceilings: a Budget per SSH connection (open channels,
// running commands) and one per server for commands over all its connections (each command is a
// `runc exec` on the host, outside the server's memory limit). take() hands out a release
// function that frees the slot exactly once.

export class Budget {
  private held = 0;

  constructor(readonly max: number) {}

  /** A release function, or null when all `max` slots are held. */
  take(): (() => void) | null {
    if (this.held >= this.max) return null;
    this.held += 1;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.held -= 1;
    };
  }

  get used(): number {
    return this.held;
  }
}

/** Running commands per server; a server's entry exists only while it runs some. */
export class CommandSlots {
  private readonly perServer = new Map<string, Budget>();

  constructor(private readonly maxPerServer: number) {}

  /** A slot of both the connection's budget and the server's, or the sentence saying which is full. */
  take(serverId: string, connection: Budget): (() => void) | string {
    let server = this.perServer.get(serverId);
    if (!server) this.perServer.set(serverId, (server = new Budget(this.maxPerServer)));
    const a = connection.take();
    if (!a) return `too many commands running on this connection (limit ${connection.max}); wait for one to end`;
    const b = server.take();
    if (!b) {
      a();
      return `too many commands running on this server (limit ${server.max}, over all connections); wait for one to end`;
    }
    const budget = server;
    return () => {
      a();
      b();
      if (budget.used === 0 && this.perServer.get(serverId) === budget) this.perServer.delete(serverId);
    };
  }

  /** Commands `serverId` runs now. */
  running(serverId: string): number {
    return this.perServer.get(serverId)?.used ?? 0;
  }
}
