// CPU profile of the measured loop of a bench row (the daemon runs in the bench's process): with
// BENCH_PROFILE=<dir>, each row writes <dir>/<row>.cpuprofile (open in Chrome DevTools) and prints
// the top costs per call — self time by function and by package, and the inclusive time of a few
// named stages — read with cpuprofile.ts. Without it, a no-op.

import { Session } from 'node:inspector/promises';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { summarise } from './cpuprofile.js';

export async function profiler(label: string): Promise<{ stop(calls: number): Promise<void> }> {
  const dir = process.env.BENCH_PROFILE;
  if (!dir) return { stop: async () => {} };
  const s = new Session();
  s.connect();
  await s.post('Profiler.enable');
  await s.post('Profiler.setSamplingInterval', { interval: 100 });
  await s.post('Profiler.start');
  return {
    async stop(calls) {
      const { profile } = await s.post('Profiler.stop');
      s.disconnect();
      mkdirSync(dir, { recursive: true });
      const file = join(dir, `${label.split('.')[0]}.cpuprofile`);
      writeFileSync(file, JSON.stringify(profile));
      console.log(`   profile ${file}`);
      console.log(summarise(profile as unknown as Parameters<typeof summarise>[0], calls));
    },
  };
}
