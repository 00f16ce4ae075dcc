// A move's source (moves/source.ts MoveSource) run in this process on host-a, moving to host-b,
// with what the test gives it — the registry's names, the channel's answer to the target's
// requests, the server's state — and everything else of the host a small fake: the checkpoint
// taken is `ckp_1`, host-b is up with room, and every effect on the host (the runtime's stop,
// start and delete, the record's removal, the proxy's forget) only reported through `on`. The
// asked marks (registry/asked.ts) are real files in `dataDir`.

import { silentLogger } from '../../../src/log/index.js';
import type { Req, Res } from '../../../src/http/index.js';
import { UnsettledMoves } from '../../../src/moves/asked.js';
import { MoveHolds } from '../../../src/moves/holds.js';
import type { MovesDeps } from '../../../src/moves/index.js';
import { MoveSource } from '../../../src/moves/source.js';
import { AskedMoves, askedDir } from '../../../src/registry/index.js';
import { keptClock } from '../../helpers/clock.js';

const GiB = 1024 ** 3;

export interface FakeSourceOptions {
  dataDir: string;
  /** The registry's names as the source reads and writes them (real, or a fake of the calls it makes). */
  names: unknown;
  /** The channel's forward of a request to host-b (the prepare and the adopt). */
  forwardApi: (to: string, req: Req, res: Res, info: unknown, o: { body: Buffer }) => Promise<void>;
  /** The server's state on host-a. */
  state: 'running' | 'sleeping';
  /** Each effect on the host: stop, start, delete, remove (its record), forget (the proxy's). */
  on?: (effect: string) => void;
}

export function fakeSource(o: FakeSourceOptions): { source: MoveSource; unsettled: UnsettledMoves; d: MovesDeps } {
  const on = o.on ?? (() => {});
  const d = {
    cfg: { checkpoints: { store: 's3://bucket/x' } },
    log: silentLogger,
    registry: {
      host: 'host-a',
      identity: { run: 'run_1' },
      hosts: {
        list: async () => [
          {
            name: 'host-b',
            advertise: '127.0.0.1:1',
            up: true,
            leaseLeftMs: 10_000,
            capacity: { servers: 0, serversMax: 0, memoryFreeBytes: 64 * GiB, memoryRoomBytes: 64 * GiB, diskRoomBytes: 100 * GiB },
            drain: null,
          },
        ],
      },
      placements: { host: () => ({ name: 'host-b', advertise: '127.0.0.1:1', up: true, lease: true }), sync: async () => {} },
      asked: new AskedMoves(askedDir(o.dataDir)),
      names: o.names,
    },
    channel: { answering: () => true, probe: () => {}, forwardApi: o.forwardApi },
    presence: { state: () => o.state },
    proxy: { forget: () => on('forget') },
    runtime: {
      get: () => ({ state: o.state, rootfs: '/nonexistent' }),
      stop: async () => on('stop'),
      start: async () => on('start'),
      delete: async () => on('delete'),
    },
    hosting: {
      core: {
        checkpoints: {
          engine: { available: true },
          take: async () => ({ id: 'ckp_1' }),
          list: () => [],
          changed: () => true,
          settingsOf: () => ({}),
        },
        exposures: { list: () => [], releaseServer: async () => {} },
        domains: { handOff: () => {} },
      },
    },
    store: {
      accounts: { get: () => ({ id: 'acc_1' }) },
      checkpoints: { list: () => [], remove: async () => {} },
      domains: { byServer: () => [] },
      servers: { remove: () => on('remove'), get: () => undefined, getAny: () => undefined }, // the record: removed by the move
    },
    clock: keptClock, // the waits keep this process up, as the daemon's listeners do
  } as unknown as MovesDeps;
  const holds = new MoveHolds();
  const unsettled = new UnsettledMoves(d, silentLogger, holds);
  return { source: new MoveSource(d, silentLogger, holds, unsettled), unsettled, d };
}
