// Loads the config once: JSON file (if any) → environment overrides → zod parse → resolve
// derived values (absolute dataDir, detected public IP) → deep freeze.

import { existsSync, readFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { resolve } from 'node:path';
import { AppError } from '../errors.js';
import { applyEnv } from './env.js';
import { configSchema, envBindings, type Config } from './schema.js';

export const DEFAULT_CONFIG_FILE = '/etc/rootbox/config.json';

export interface LoadOptions {
  /** Config file path; else ROOTBOX_CONFIG; else /etc/rootbox/config.json when present. */
  file?: string;
  env?: NodeJS.ProcessEnv;
  /** Values applied over file and environment (tests use this). */
  overrides?: Record<string, unknown>;
  cwd?: string;
}

export function detectPublicIp(): string {
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) {
      if (a.family === 'IPv4' && !a.internal) return a.address;
    }
  }
  return '127.0.0.1';
}

function readFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw AppError.of('config_unreadable', `cannot read config file ${path}: ${(e as Error).message}`);
  }
  try {
    const v = JSON.parse(text);
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('top level must be a JSON object');
    return v;
  } catch (e) {
    throw AppError.of('config_invalid', `config file ${path} is not valid JSON: ${(e as Error).message}`);
  }
}

function merge(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const prev = out[k];
    out[k] =
      v && typeof v === 'object' && !Array.isArray(v) && prev && typeof prev === 'object' && !Array.isArray(prev)
        ? merge(prev as Record<string, unknown>, v as Record<string, unknown>)
        : v;
  }
  return out;
}

export function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

export function loadConfig(opts: LoadOptions = {}): Readonly<Config> {
  const env = opts.env ?? process.env;
  const file = opts.file ?? env.ROOTBOX_CONFIG ?? (existsSync(DEFAULT_CONFIG_FILE) ? DEFAULT_CONFIG_FILE : undefined);
  const fromFile = file ? readFile(file) : {};
  const { raw, sources } = applyEnv(fromFile, envBindings, env);
  const parsed = configSchema.safeParse(merge(raw, opts.overrides ?? {}));
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => {
      const key = i.path.join('.') || '(top level)';
      const src = sources.get(key);
      return `config key \`${key}\`${src ? ` (from ${src})` : file ? ` (in ${file})` : ''}: ${i.message}`;
    });
    throw AppError.of('config_invalid', lines.join('; '));
  }
  const cfg = parsed.data as Config;
  cfg.dataDir = resolve(opts.cwd ?? process.cwd(), cfg.dataDir);
  cfg.publicIp = cfg.publicIp ?? detectPublicIp();
  return deepFreeze(cfg);
}
