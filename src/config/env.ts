// Environment overrides: which variable sets which config key. Each slice lists its own.

export interface EnvBinding {
  env: string;
  /** Dotted path of the config key the variable sets. */
  path: string;
  /** Read another variable when this one is unset (e.g. OPENAI_API_KEY). */
  fallback?: string;
}

/** Writes every set variable into a copy of the raw (unparsed) config object. */
export function applyEnv(
  raw: Record<string, unknown>,
  bindings: readonly EnvBinding[],
  env: NodeJS.ProcessEnv,
): { raw: Record<string, unknown>; sources: Map<string, string> } {
  const out = structuredClone(raw);
  const sources = new Map<string, string>();
  for (const b of bindings) {
    const name = env[b.env] !== undefined ? b.env : b.fallback && env[b.fallback] !== undefined ? b.fallback : undefined;
    if (!name) continue;
    const value = env[name] as string;
    const keys = b.path.split('.');
    let node: Record<string, unknown> = out;
    for (const k of keys.slice(0, -1)) {
      const next = node[k];
      if (next === undefined || next === null || typeof next !== 'object') node[k] = {};
      node = node[k] as Record<string, unknown>;
    }
    node[keys[keys.length - 1]] = value;
    sources.set(b.path, name);
  }
  return { raw: out, sources };
}
