// The metrics slice of the config: where the Prometheus endpoint listens (a listener of its own,
// loopback by default, never the public edge).

import { z } from 'zod';
import type { EnvBinding } from './env.js';

const LISTEN = /^(off|(\[[0-9a-fA-F:.]+\]|[^:[\]\s]+):\d{1,5})$/;

export const metricsSchema = z
  .strictObject({
    listen: z
      .string()
      .regex(LISTEN, 'must be "host:port" (e.g. "127.0.0.1:9464") or "off"')
      .default('127.0.0.1:9464')
      .describe(
        'Address of the Prometheus metrics listener (GET /metrics), separate from the public edge: "host:port", or "off" for no listener. Keep it on loopback or a private network: it is not authenticated.',
      ),
  })
  .prefault({});

export const metricsEnv: EnvBinding[] = [{ env: 'ROOTBOX_METRICS_LISTEN', path: 'metrics.listen' }];
