// Public surface of structured logging: one JSON object per line on stdout (journald keeps each
// line as one entry). Field names that look like secrets are redacted before anything is written,
// so a caller that passes a whole object by mistake still never leaks a key. The logger is in
// logger.ts; where an operator reads its lines (journald or serve's output) in where.ts.

export { createLogger, silentLogger, type Level, type Logger, type Sink } from './logger.js';
export { logWhere, underSystemd } from './where.js';
