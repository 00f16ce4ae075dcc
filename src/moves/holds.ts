// The servers whose requests wait while they move off this host: from the stop of a running
// server (a sleeping one: from the move's start) until the target confirmed or the move failed.
// A request for such a server (the edge's front, the channel's owner side) and every start of it
// (the runtime's start guard: a wake, an SSH login) waits for the hold to end instead of waking
// the copy that is leaving; then it goes where the server is (its owner, over the channel) —
// a short wait, never an answer of the old copy nor a wake on two hosts.

export class MoveHolds {
  private readonly byId = new Map<string, { slug: string; done: Promise<void> }>();
  private readonly bySlug = new Map<string, string>();

  /** Requests for the server wait from now until the returned function is called. */
  begin(id: string, slug: string): () => void {
    let end!: () => void;
    const done = new Promise<void>((r) => (end = r));
    this.byId.set(id, { slug, done });
    this.bySlug.set(slug, id);
    return () => {
      if (this.byId.get(id)?.done === done) {
        this.byId.delete(id);
        this.bySlug.delete(slug);
      }
      end();
    };
  }

  /** Resolves when the hold on server `id` ends; undefined when none is held. */
  ofServer(id: string): Promise<void> | undefined {
    return this.byId.get(id)?.done;
  }

  /** The same for a server by its slug. */
  ofSlug(slug: string): Promise<void> | undefined {
    const id = this.bySlug.get(slug);
    return id === undefined ? undefined : this.ofServer(id);
  }

  get size(): number {
    return this.byId.size;
  }
}
