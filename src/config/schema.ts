// The whole config schema, assembled from one slice per concern. Every field carries a
// description; `bin/rootbox config docs` prints them and the README's reference is checked
// against that output by a test.

import { z } from 'zod';
import { billingEnv, billingSchema } from './billing.js';
import { checkpointsEnv, checkpointsSchema } from './checkpoints.js';
import { clusterEnv, clusterSchema } from './cluster.js';
import { coreEnv, coreShape } from './core.js';
import { hostingEnv, hostingSchema } from './hosting.js';
import { metricsEnv, metricsSchema } from './metrics.js';
import { proxyEnv, proxySchema } from './proxy.js';
import { verifyEnv, verifySchema } from './verify.js';
import { runtimeEnv, runtimeSchema } from './runtime.js';
import type { EnvBinding } from './env.js';

export const configSchema = z
  .object({
    ...coreShape,
    hosting: hostingSchema,
    billing: billingSchema,
    verify: verifySchema,
    runtime: runtimeSchema,
    proxy: proxySchema,
    metrics: metricsSchema,
    cluster: clusterSchema,
    checkpoints: checkpointsSchema,
  })
  .strict();

export const envBindings: readonly EnvBinding[] = [
  ...coreEnv,
  ...hostingEnv,
  ...billingEnv,
  ...verifyEnv,
  ...proxyEnv,
  ...runtimeEnv,
  ...metricsEnv,
  ...clusterEnv,
  ...checkpointsEnv,
];

export type Config = z.output<typeof configSchema> & { publicIp: string };
