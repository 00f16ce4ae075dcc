// The proxy slice of the config: the subdomain edge's idle/doze/sleep policy, how requests are held
// while a server wakes, and the limits put on upstream apps (connect and inactivity timeouts).

import { z } from 'zod';
import { duration } from './fields.js';
import type { EnvBinding } from './env.js';

const bytes = () => z.coerce.number().int().min(0);

export const proxySchema = z
  .strictObject({
    idleTimeout: duration()
      .prefault('5m')
      .describe(
        'A server goes to sleep after this long without activity: an HTTP request to its app, an SSH session, bytes on a WebSocket or exposed-port connection. It dozes first (see dozeTimeout); a WebSocket or exposed-port connection that stays open but quiet lets it doze (its next byte thaws it) but not be stopped. never_sleep servers never sleep.',
      ),
    dozeTimeout: duration()
      .prefault('30m')
      .describe(
        'An idle server first dozes: its processes are frozen (cgroup freezer), its memory kept and not billed, its state shown as sleeping, and a request, SSH login or exposed-port connection thaws it in milliseconds. After dozing this long it is stopped (memory freed). 0 turns dozing off: idle servers are stopped at idleTimeout.',
      ),
    dozeMemoryFloor: bytes()
      .default(1024 ** 3)
      .describe(
        "Host memory (MemAvailable, plus the free pages on the kernel's per-CPU lists, where a stopped server's pages land first) kept free: below it, dozing servers are stopped, least recently used first, only as many as the missing memory needs by the anonymous memory each holds; a stopped server's memory counts as coming back until MemAvailable shows it (or 1.5 s have passed), so one shortfall does not stop a second server. Once no dozing server is left to stop, parked containers of sleeping servers (runtime.parkOnSleep) are removed, least recently parked first. 0 turns it off.",
      ),
    idleCheckInterval: duration().prefault('5s').describe('How often the idle tracker looks for servers to put to sleep.'),
    wakeTimeout: duration()
      .prefault('30s')
      .describe('How long a request for a sleeping run.sh server is held while the server starts and its app binds port 80; after that it gets a 504 page.'),
    appStartGrace: duration()
      .prefault('2s')
      .describe(
        'When a running server has /root/run.sh but nothing accepts on port 80 yet (it just appeared or is restarting), requests wait this long for the app before a 502 page.',
      ),
    publishCheckInterval: duration()
      .prefault('500ms')
      .describe(
        'How long the answer to "is /root/run.sh published?" is cached per server; bounds how fast the subdomain switches between static files and the app.',
      ),
    holdLimit: z.coerce
      .number()
      .int()
      .min(1)
      .default(256)
      .describe('Most requests (and WebSocket upgrades) held per server while it wakes; more get 503 with Retry-After.'),
    holdBodyLimit: bytes()
      .default(1024 * 1024)
      .describe('Bytes of a held request body read into memory while the server wakes; beyond that the client is slowed down by back-pressure, never refused.'),
    connectTimeout: duration().prefault('5s').describe("Time limit for opening a TCP connection to a server's port 80."),
    upstreamTimeout: duration()
      .prefault('120s')
      .describe(
        'An upstream connection that sends nothing for this long (no response headers, no body bytes) is closed; the client gets 504 if nothing was sent yet.',
      ),
    maxSocketsPerServer: z.coerce
      .number()
      .int()
      .min(1)
      .default(256)
      .describe("Most concurrent connections the proxy opens to one server's port 80; kept alive and reused."),
    maxWaitingPerServer: z.coerce
      .number()
      .int()
      .min(1)
      .default(256)
      .describe(
        "Most requests waiting for a connection to one server's port 80 (maxSocketsPerServer and maxSocketsPerSource). A newcomer to that full queue takes the place of the oldest waiter of the source with the most waiting, when it has at least two more than the newcomer's (that one gets 503 `app_busy` with Retry-After), else it gets that 503 itself.",
      ),
    maxSocketsPerSource: z.coerce
      .number()
      .int()
      .min(1)
      .default(64)
      .describe(
        "Fair share of one source (an IPv4 address or an IPv6 /64; for a request forwarded by another cluster host, the client's address) in a server's maxSocketsPerServer connections: a source holding this many waits for one of its own to end, and with as many of its requests already waiting it gets 429 `too_many_app_requests` with Retry-After, so one client's stalled or slow requests cannot starve the server's other clients. At or above maxSocketsPerServer: no share.",
      ),
    bodyIdleTimeout: duration()
      .prefault('30s')
      .describe(
        "A request body being forwarded to an app that brings no byte for this long (while the app takes what it gets) ends its request: 408 `body_timeout` when nothing was answered yet (the client's connection is closed), and the app's connection is freed for other requests. Not counted while the request waits for a connection or the app is not reading.",
      ),
    lane: z
      .enum(['on', 'off'])
      .default('on')
      .describe(
        "HTTP/1.1 GET and HEAD requests without a body to a server that has an app are read and answered by the edge's own lean HTTP/1.1 path (waking the server like any request) instead of node's HTTP server; everything else, and every later request on that connection, takes node's server as before. `off`: every request takes node's server.",
      ),
  })
  .prefault({});

export const proxyEnv: EnvBinding[] = [
  { env: 'ROOTBOX_IDLE_TIMEOUT', path: 'proxy.idleTimeout' },
  { env: 'ROOTBOX_WAKE_TIMEOUT', path: 'proxy.wakeTimeout' },
  { env: 'ROOTBOX_DOZE_TIMEOUT', path: 'proxy.dozeTimeout' },
  { env: 'ROOTBOX_DOZE_MEMORY_FLOOR', path: 'proxy.dozeMemoryFloor' },
  { env: 'ROOTBOX_UPSTREAM_TIMEOUT', path: 'proxy.upstreamTimeout' },
  { env: 'ROOTBOX_PROXY_LANE', path: 'proxy.lane' },
];

export type ProxyConfig = z.output<typeof proxySchema>;
