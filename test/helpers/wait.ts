// Waiting in tests: sleep(), and until() polling a condition against a deadline whose error names
// what was awaited.

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

type Got<T> = Exclude<T, undefined | null | false>;

/** Polls `cond` every `every` ms until it gives something other than undefined, null or false,
 *  and returns that; throws "timed out waiting for <what>" after `ms`. */
export async function until<T>(what: string, cond: () => T | Promise<T>, ms = 30_000, every = 25): Promise<Got<T>> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v !== undefined && v !== null && v !== false) return v as Got<T>;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(every);
  }
}
