// The servers whose requests wait while they move off this host: from the stop of a running
// server (a sleeping one: from the move's start) until the target confirmed or the move failed.
// A sleeping server without an app lets its requests through meanwhile (`pass`): its static pages
// are served from its disk here, which nothing writes while its starts are held, until the
// target's answer (`hold` again, for the hand-over).
// A request for such a server (the edge's front, the channel's owner side) and every start of it
// (the runtime's start guard: a wake, an SSH login) waits for the hold to end instead of waking
// the copy that is leaving; then it goes where the server is (its owner, over the channel) —
// a short wait, never an answer of the old copy nor a wake on two hosts.

export class MoveHolds {
  private readonly byId = new Map<string, { slug: string; done: Promise<void>; passing?: boolean }>();
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

  /** Requests for held server `id` go through (its starts stay held) until `hold`. */
  pass(id: string): void {
    const h = this.byId.get(id);
    if (h) h.passing = true;
  }

  /** Requests for held server `id` wait again. */
  hold(id: string): void {
    const h = this.byId.get(id);
    if (h) h.passing = false;
  }

  /** Resolves when the hold on server `id` ends (every start of it waits for this); undefined when none is held. */
  ofServer(id: string): Promise<void> | undefined {
    return this.byId.get(id)?.done;
  }

  /** The same for a request to a server by its slug; undefined while its requests pass. */
  ofSlug(slug: string): Promise<void> | undefined {
    const id = this.bySlug.get(slug);
    const h = id === undefined ? undefined : this.byId.get(id);
    return h && !h.passing ? h.done : undefined;
  }

  get size(): number {
    return this.byId.size;
  }
}
