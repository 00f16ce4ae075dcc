// The logger: one JSON object per line (time, level, message, the fields), written to a sink
// (stdout by default) at or above a level; field names that look like secrets redacted first, at
// any depth; children carrying fields of their own.

export type Level = 'debug' | 'info' | 'warn' | 'error';
const order: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

const SECRET_FIELD = /(authorization|api_?key|secret|token|password|private_?key|signature|x-payment|payment-signature|cookie|code_hash|^code$)/i;

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export type Sink = (line: string) => void;

function redact(value: unknown, depth = 0): unknown {
  if (depth > 6 || value === null || typeof value !== 'object') return value;
  if (value instanceof Error) {
    return { name: value.name, message: value.message, stack: value.stack, code: (value as { code?: unknown }).code };
  }
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    out[k] = SECRET_FIELD.test(k) ? '[redacted]' : redact(v, depth + 1);
  }
  return out;
}

export function createLogger(opts: { level?: Level; sink?: Sink; base?: Record<string, unknown> } = {}): Logger {
  const min = order[opts.level ?? 'info'];
  const sink: Sink = opts.sink ?? ((line) => process.stdout.write(line + '\n'));
  const base = opts.base ?? {};
  const emit = (level: Level, msg: string, fields?: Record<string, unknown>) => {
    if (order[level] < min) return;
    const rec = redact({ ...base, ...fields }) as Record<string, unknown>;
    let line: string;
    try {
      line = JSON.stringify({ time: new Date().toISOString(), level, msg, ...rec });
    } catch {
      line = JSON.stringify({ time: new Date().toISOString(), level, msg, note: 'fields not serialisable' });
    }
    sink(line);
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: (fields) => createLogger({ level: opts.level, sink, base: { ...base, ...fields } }),
  };
}

/** A logger that drops everything; for tests that do not read logs. */
export const silentLogger: Logger = createLogger({ sink: () => {} });
