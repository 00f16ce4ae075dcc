// The runtime slice of the config: where images, bundles and runc state live; the container
// network (bridge, subnet, nftables table) and the bounds on servers' outbound connections; uid ranges; default process limits; stop grace.

import { z } from 'zod';
import { duration, list, port } from './fields.js';
import type { EnvBinding } from './env.js';

const flowBounds = (who: string, flows: number, perSecond: number) =>
  z
    .strictObject({
      flows: z.coerce
        .number()
        .int()
        .min(16)
        .max(1_000_000)
        .default(flows)
        .describe(
          `Connections (TCP, UDP and other flows in the host's connection table) a server of ${who} may have open at once; its new ones beyond are dropped.`,
        ),
      newFlowsPerSecond: z.coerce
        .number()
        .int()
        .min(1)
        .max(100_000)
        .default(perSecond)
        .describe(`New connections a server of ${who} may open per second (a burst of as many allowed); beyond, they are dropped.`),
    })
    .prefault({});

const ifname = z.string().regex(/^[a-z][a-z0-9]{0,9}$/, 'must be 1-10 lowercase letters/digits starting with a letter');

export const runtimeSchema = z
  .strictObject({
    imageDir: z
      .string()
      .optional()
      .describe(
        'Directory of built base images (`<name>-<recipe hash>/rootfs`). Default `<dataDir>/images`. Share one across data dirs (tests do, through ROOTBOX_IMAGE_DIR) to build the image once.',
      ),
    image: z
      .string()
      .regex(/^[a-z0-9][a-z0-9-]{0,30}$/)
      .default('bookworm')
      .describe('Name of the base image servers are created from; `rootbox image build` builds it.'),
    mirror: z.string().url().default('http://deb.debian.org/debian').describe('Debian mirror debootstrap downloads the base image from.'),
    bridge: ifname
      .default('rbx0')
      .describe(
        "Name of the Linux bridge containers attach to; host-side veths are named `<bridge>v<n>`. One daemon per set of host names: a daemon refuses to start (`host_names_taken`, naming the holder's pid) while another live daemon holds its bridge, nft table, data dir (flock locks under /run/rootbox/locks) or overlaps its subnet, uid range, `hosting.portPool` or metrics port; `rootbox doctor` reports such a clash.",
      ),
    subnet: z
      .string()
      .regex(/^\d+\.\d+\.\d+\.\d+\/(1[6-9]|2[0-4])$/, 'must be an IPv4 CIDR between /16 and /24, e.g. 10.88.0.0/16')
      .default('10.88.0.0/16')
      .describe('IPv4 subnet of the bridge; the host takes the first address, servers the rest.'),
    nftTable: z
      .string()
      .regex(/^[a-z][a-z0-9_]{0,30}$/)
      .default('rootbox')
      .describe(
        "Name of the nftables tables (`inet <name>` and `bridge <name>`) holding NAT, isolation and egress counters; also the parent of its servers' cgroups (`/<name>/<server id>`: `/rootbox/<id>` by default), so that two daemons of one machine never share a server's cgroup.",
      ),
    // Bounds on each server's outbound connections, enforced in nftables per server (network.ts,
    // netbounds.ts) by its account's tier; a tier change applies to running servers at once.
    egress: z
      .strictObject({
        blockedPorts: list(port().min(1))
          .prefault([25])
          .describe(
            "Outbound TCP destination ports refused to every server (a TCP reset), comma-separated in the environment. Port 25 keeps servers from sending mail straight to other mail servers (spam from the host's address); 465 and 587 (submission to a mail provider) stay open. `[]` blocks nothing.",
          ),
        anonymous: flowBounds('an anonymous account (no verified phone)', 1000, 100),
        verified: flowBounds('a phone-verified account', 4000, 400),
        paid: flowBounds('an account with a positive balance', 16000, 1000),
        logEvery: duration()
          .prefault('1m')
          .describe(
            "At most one line per this period in a server's /var/log/rootbox.log telling it how many of its new connections were dropped for its bounds (the count is in the metric rootbox_egress_flows_dropped_total at once).",
          ),
      })
      .prefault({}),
    uidStart: z.coerce
      .number()
      .int()
      .min(65536)
      .max(4_000_000_000)
      .default(1_000_000_000)
      .describe('First host uid of the server uid ranges; each server gets the next free block of 65536 ids.'),
    uidRanges: z.coerce.number().int().min(1).max(60000).default(4096).describe('Most uid ranges (and so servers) this host hands out.'),
    pidsLimit: z.coerce.number().int().min(16).max(1_000_000).default(1024).describe('Most processes/threads one server may run (fork bombs stop here).'),
    cpuShares: z.coerce.number().int().min(2).max(262144).default(1024).describe('cgroup cpu.shares of every server (relative weight under contention).'),
    stopGrace: duration().prefault('3s').describe('How long stop waits after SIGTERM before SIGKILL.'),
    parkOnSleep: z
      .enum(['on', 'off'])
      .default('on')
      .describe(
        "Park sleeping servers: when a server goes to sleep its container is made again at once and left in runc's `created` state (init waiting, no user process), so a wake is only runc's start plus the app's own start (a cold wake ~30-40 ms sooner). A parked server is asleep (no RAM billed, exec refused); its waiting init holds about 2 MB of host memory in the server's cgroup, which the memory floor (`proxy.dozeMemoryFloor`) frees, least recently parked first, and delete removes. `off`: a sleeping server has no container.",
      ),
    reconcile: z
      .enum(['on', 'off'])
      .default('on')
      .describe('At start-up, adopt running containers, remove orphans and start servers that should run. `off` leaves runc state untouched.'),
  })
  .prefault({});

export const runtimeEnv: EnvBinding[] = [
  { env: 'ROOTBOX_IMAGE_DIR', path: 'runtime.imageDir' },
  { env: 'ROOTBOX_IMAGE', path: 'runtime.image' },
  { env: 'ROOTBOX_MIRROR', path: 'runtime.mirror' },
  { env: 'ROOTBOX_BRIDGE', path: 'runtime.bridge' },
  { env: 'ROOTBOX_SUBNET', path: 'runtime.subnet' },
  { env: 'ROOTBOX_NFT_TABLE', path: 'runtime.nftTable' },
  { env: 'ROOTBOX_EGRESS_BLOCKED_PORTS', path: 'runtime.egress.blockedPorts' },
  { env: 'ROOTBOX_UID_START', path: 'runtime.uidStart' },
  { env: 'ROOTBOX_PIDS_LIMIT', path: 'runtime.pidsLimit' },
  { env: 'ROOTBOX_STOP_GRACE', path: 'runtime.stopGrace' },
  { env: 'ROOTBOX_PARK_ON_SLEEP', path: 'runtime.parkOnSleep' },
  { env: 'ROOTBOX_RECONCILE', path: 'runtime.reconcile' },
];

export type RuntimeConfig = z.output<typeof runtimeSchema>;
