// Public surface of the config module: load once, frozen; the schema; the reference renderer.
export { loadConfig, detectPublicIp, deepFreeze, DEFAULT_CONFIG_FILE, type LoadOptions } from './load.js';
export { configSchema, envBindings, type Config } from './schema.js';
export { configReference, configFields } from './docs.js';
export { parseDuration } from './fields.js';
export { proxySchema, type ProxyConfig } from './proxy.js';
export type { RuntimeConfig } from './runtime.js';
export { hostName } from './cluster.js';
export { S3_STORE_URL, type CheckpointS3Config } from './checkpoints-s3.js';
