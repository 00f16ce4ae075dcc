// What the idle tracker knows of a server's use: when it was last active (touch, a request, a
// byte), the work under way that holds it awake (hold: an HTTP exchange, an SSH channel) and its
// open connections (connection: a WebSocket, an exposed-port connection), with the byte counts of
// what the server sent on them, read at every check. A hold keeps the server awake; an open
// connection only keeps it from being stopped (a quiet one lets it doze). Kept-alive HTTP
// connections are neither: between requests the server is idle.

const count = (m: Map<string, number>, id: string, by: number) => {
  const n = (m.get(id) ?? 0) + by;
  if (n <= 0) m.delete(id);
  else m.set(id, n);
};

export class Activity {
  private readonly last = new Map<string, number>();
  private readonly holds = new Map<string, number>();
  private readonly conns = new Map<string, number>();
  private readonly probes = new Map<string, Set<{ sent: () => number; seen: number }>>();

  constructor(private readonly now: () => number) {}

  /** Records activity now. */
  mark(id: string): void {
    this.last.set(id, this.now());
  }

  /** Records activity at `at` (a check's time: a server first seen starts its idle time then). */
  markAt(id: string, at: number): void {
    this.last.set(id, at);
  }

  /** Last activity (epoch ms), undefined for a server not seen yet. */
  lastAt(id: string): number | undefined {
    return this.last.get(id);
  }

  hold(id: string): () => void {
    return this.counted(this.holds, id);
  }

  /** An open connection; `sent`, when given, is a byte count read at every check: a change is activity. */
  connection(id: string, sent?: () => number): () => void {
    const release = this.counted(this.conns, id);
    if (!sent) return release;
    const probe = { sent, seen: sent() };
    const set = this.probes.get(id) ?? new Set();
    this.probes.set(id, set.add(probe));
    return () => {
      set.delete(probe);
      if (!set.size && this.probes.get(id) === set) this.probes.delete(id);
      release();
    };
  }

  /** Marks activity for connections whose byte count moved since the last check. */
  probe(id: string): void {
    for (const p of this.probes.get(id) ?? []) {
      const n = p.sent();
      if (n !== p.seen) {
        p.seen = n;
        this.mark(id);
      }
    }
  }

  private counted(m: Map<string, number>, id: string): () => void {
    count(m, id, 1);
    this.mark(id);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      count(m, id, -1);
      this.mark(id);
    };
  }

  /** Whether work under way holds the server awake. */
  held(id: string): boolean {
    return this.holds.has(id);
  }

  /** Whether a connection to the server is open (a stop would cut it). */
  connected(id: string): boolean {
    return this.conns.has(id);
  }

  /** Forgets the last activity of servers no longer listed (`seen`) and neither held nor connected. */
  prune(seen: Set<string>): void {
    for (const id of this.last.keys()) if (!seen.has(id) && !this.holds.has(id) && !this.conns.has(id)) this.last.delete(id);
  }

  forget(id: string): void {
    this.last.delete(id);
    this.holds.delete(id);
    this.conns.delete(id);
    this.probes.delete(id);
  }
}
