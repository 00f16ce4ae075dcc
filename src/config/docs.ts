// Renders the configuration reference (a Markdown table) from the zod schema itself, so the
// README cannot drift from what the daemon accepts.

import { z } from 'zod';
import { configSchema, envBindings } from './schema.js';

interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  description?: string;
  default?: unknown;
  anyOf?: JsonSchema[];
  enum?: unknown[];
}

export interface ConfigField {
  key: string;
  env?: string;
  default?: unknown;
  description: string;
}

export function configFields(): ConfigField[] {
  const root = z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
  const envFor = new Map(envBindings.map((b) => [b.path, b.fallback ? `${b.env} (or ${b.fallback})` : b.env]));
  const out: ConfigField[] = [];
  const walk = (node: JsonSchema, prefix: string) => {
    for (const [name, child] of Object.entries(node.properties ?? {})) {
      const key = prefix ? `${prefix}.${name}` : name;
      if (child.properties && !child.description) {
        walk(child, key);
        continue;
      }
      out.push({ key, env: envFor.get(key), default: child.default, description: child.description ?? '' });
    }
  };
  walk(root, '');
  return out;
}

const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');

export function configReference(): string {
  const rows = configFields().map((f) => {
    const def = f.default === undefined ? '' : `\`${JSON.stringify(f.default)}\``;
    return `| \`${f.key}\` | ${f.env ? `\`${f.env}\`` : ''} | ${def} | ${cell(f.description)} |`;
  });
  return ['| key | environment | default | meaning |', '|---|---|---|---|', ...rows].join('\n');
}
