// The metric definitions (one prom-client registry owned by this module) and the recording
// functions other modules call. Recording is O(1), never throws and works whether or not a
// listener serves the registry: with metrics off the numbers are simply never read.

import { statSync, statfsSync } from 'node:fs';
import { freemem, totalmem } from 'node:os';
import { join } from 'node:path';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

export const registry = new Registry();

/** What the scrape-time gauges read; set by the composition root, absent parts read as nothing. */
export interface ScrapeSources {
  /** The runtime's servers (state only). */
  servers?: () => Iterable<{ state: string }>;
  /** The data dir: disk headroom is its filesystem's, the LMDB file is <dataDir>/db/data.mdb. */
  dataDir?: string;
  /** Cluster mode: this host's drain, undefined when it is not draining (moves/drain.ts). */
  drain?: () => { moved: number; left: number; failed: number; moving: number } | undefined;
}
let sources: ScrapeSources = {};

/** Sets what the gauges read; the returned function puts back the previous sources (a daemon
 *  stopping in a process that runs another, as tests do, leaves the other's in place). */
export function setScrapeSources(s: ScrapeSources): () => void {
  const previous = sources;
  sources = s;
  return () => {
    if (sources === s) sources = previous;
  };
}

const SERVER_STATES = ['creating', 'running', 'sleeping', 'waking', 'stopped', 'failed'];

// The two per-request metrics are counted in plain numbers and handed to prom-client when the
// registry is read (or every LATENCY_BATCH answers): prom-client's label lookup per request cost
// the proxy about a microsecond of its event loop per answer.
const counted = new Map<string, number>();
const latencies: number[] = [];
const LATENCY_BATCH = 4096;
function handOver(): void {
  for (const [key, n] of counted) {
    const at = key.indexOf(' ');
    httpRequests.inc({ host: key.slice(0, at), status: key.slice(at + 1) }, n);
  }
  counted.clear();
  for (const s of latencies) proxyLatency.observe(s);
  latencies.length = 0;
}

const httpRequests = new Counter({
  name: 'rootbox_http_requests_total',
  help: 'HTTP requests answered by the edge, by host kind (api, verify, site, other) and status code.',
  labelNames: ['host', 'status'] as const,
  registers: [registry],
  collect: handOver,
});
const proxyLatency = new Histogram({
  name: 'rootbox_proxy_response_seconds',
  help: "Time from a proxied request's arrival to the end of the answer sent to the client (sites served by a server's app or static files).",
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
  collect: handOver,
});
const wakes = new Counter({
  name: 'rootbox_wakes_total',
  help: 'Sleeping servers woken, by result (ok, failed).',
  labelNames: ['result'] as const,
  registers: [registry],
});
const wakeLatency = new Histogram({
  name: 'rootbox_wake_seconds',
  help: 'Time a wake took, from the first caller asking to the server running.',
  buckets: [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
  registers: [registry],
});
const sleeps = new Counter({ name: 'rootbox_sleeps_total', help: 'Servers put to sleep after being idle.', registers: [registry] });
const sshSessions = new Counter({ name: 'rootbox_ssh_sessions_total', help: 'SSH connections authenticated with a server key.', registers: [registry] });
const sshFailedLogins = new Counter({ name: 'rootbox_ssh_failed_logins_total', help: 'SSH authentication attempts refused.', registers: [registry] });
const payments = new Counter({
  name: 'rootbox_payments_total',
  help: 'x402 paywall outcomes: required (402 asked for payment), settled, pending (settlement unknown, reconciled later), or the refusal code (e.g. payment_rejected, payment_settlement_failed).',
  labelNames: ['outcome'] as const,
  registers: [registry],
});
const transfers = new Counter({
  name: 'rootbox_settlement_transfers_total',
  help: 'Self-settlement transfers (verify.x402.settlement self): mined, reverted (the gas wallet paid for a transfer that failed on chain), or withheld (not broadcast: the payer moved the funds or the authorization was used during the paid work).',
  labelNames: ['result'] as const,
  registers: [registry],
});
const llmPasses = new Counter({
  name: 'rootbox_llm_passes_total',
  help: 'LLM verification passes, by result (ok, failed).',
  labelNames: ['result'] as const,
  registers: [registry],
});
const llmLatency = new Histogram({
  name: 'rootbox_llm_pass_seconds',
  help: 'Time one LLM verification pass took (successful or not).',
  buckets: [0.5, 1, 2, 5, 10, 20, 30, 60, 120],
  registers: [registry],
});
const smsSends = new Counter({
  name: 'rootbox_sms_sends_total',
  help: 'SMS sends, by provider (twilio, log) and result (ok, failed).',
  labelNames: ['provider', 'result'] as const,
  registers: [registry],
});
const flowsDropped = new Counter({
  name: 'rootbox_egress_flows_dropped_total',
  help: "New outbound connections of servers dropped by their bounds (runtime.egress), by bound: `open` (the server had its most connections open), `rate` (it opened them faster than its rate). Read from nftables' per-server counters every couple of seconds.",
  labelNames: ['bound'] as const,
  registers: [registry],
});
const forwardedCounts = new Map<string, number>();
new Counter({
  name: 'rootbox_channel_forwarded_total',
  help: "Requests this host forwarded over the cluster channel, by peer host and outcome: answered (the owner's answer went to the client), not_here (the owner no longer runs the server; a retry is counted again), unavailable (503 host_unavailable), loop (502 forward_loop), cut (a lane answer cut or its client gone).",
  labelNames: ['peer', 'outcome'] as const,
  registers: [registry],
  collect() {
    // counted per request in plain numbers (forwardedCounts), handed over when read
    for (const [key, n] of forwardedCounts) {
      const at = key.indexOf(' ');
      this.inc({ peer: key.slice(0, at), outcome: key.slice(at + 1) }, n);
    }
    forwardedCounts.clear();
  },
});
const channelErrors = new Counter({
  name: 'rootbox_channel_errors_total',
  help: "Failures of this host's channel to a peer host, by kind: connect (no session could be opened), loop (the peer's address leads back here), session (an open session failed), ping (the peer stopped answering pings), stream (a forwarded request's stream failed before an answer).",
  labelNames: ['peer', 'kind'] as const,
  registers: [registry],
});

/** What each bounded door holds now, summed over the readers registered for it (one per daemon). */
const heldReaders = new Map<HeldDoor, Set<() => number>>();
export type HeldDoor = 'exec_stdin' | 'forward_retry';
new Gauge({
  name: 'rootbox_held_bytes',
  help: 'Bytes held in memory at a door that bounds them (read at scrape), by door: exec_stdin (input of execs over a WebSocket that their commands have not taken yet; beyond a small buffer per exec its socket is paused), forward_retry (request bodies kept to be sent again over the cluster channel; bounded per source by cluster.forwardRetryPerSource and in total by cluster.forwardRetryTotal).',
  labelNames: ['door'] as const,
  registers: [registry],
  collect() {
    this.reset();
    for (const door of ['exec_stdin', 'forward_retry'] as const) {
      let n = 0;
      for (const read of heldReaders.get(door) ?? []) n += safe(() => read()) ?? 0;
      this.set({ door }, n);
    }
  },
});

/** Readers of the automatic-checkpoint backlog (one per daemon), summed at scrape. */
const backlogReaders = new Set<() => number>();
new Gauge({
  name: 'rootbox_checkpoint_backlog',
  help: 'Servers waiting for an automatic checkpoint (read at scrape): queued, or failed and waiting to be tried again with back-off (the checkpoint store unreachable keeps them here until it is back).',
  registers: [registry],
  collect() {
    let n = 0;
    for (const read of backlogReaders) n += safe(() => read()) ?? 0;
    this.set(n);
  },
});

new Gauge({
  name: 'rootbox_drain_servers',
  help: "This host's drain (rootbox cluster drain; read at scrape, absent when it is not draining), by state: moved (off this host since the drain began), left (still here), failed (their last move failed; tried again later), moving (now).",
  labelNames: ['state'] as const,
  registers: [registry],
  collect() {
    this.reset();
    const p = safe(() => sources.drain?.());
    if (p) for (const state of ['moved', 'left', 'failed', 'moving'] as const) this.set({ state }, p[state]);
  },
});

new Gauge({
  name: 'rootbox_servers',
  help: "Servers known to the runtime, by state (read at scrape from the runtime's list).",
  labelNames: ['state'] as const,
  registers: [registry],
  collect() {
    this.reset();
    const counts = new Map(SERVER_STATES.map((s) => [s, 0]));
    try {
      for (const s of sources.servers?.() ?? []) counts.set(s.state, (counts.get(s.state) ?? 0) + 1);
    } catch {
      /* a runtime not started yet reads as no servers */
    }
    for (const [state, n] of counts) this.set({ state }, n);
  },
});
new Gauge({
  name: 'rootbox_host_memory_available_bytes',
  help: 'Memory the host still has available (read at scrape).',
  registers: [registry],
  collect() {
    this.set(freemem());
  },
});
new Gauge({
  name: 'rootbox_host_memory_total_bytes',
  help: "The host's total memory.",
  registers: [registry],
  collect() {
    this.set(totalmem());
  },
});
new Gauge({
  name: 'rootbox_host_disk_available_bytes',
  help: "Bytes available to the daemon on the data dir's filesystem (read at scrape).",
  registers: [registry],
  collect() {
    const s = safe(() => sources.dataDir && statfsSync(sources.dataDir));
    this.set(s ? s.bavail * s.bsize : 0);
  },
});
new Gauge({
  name: 'rootbox_host_disk_total_bytes',
  help: "Size of the data dir's filesystem.",
  registers: [registry],
  collect() {
    const s = safe(() => sources.dataDir && statfsSync(sources.dataDir));
    this.set(s ? s.blocks * s.bsize : 0);
  },
});
new Gauge({
  name: 'rootbox_lmdb_size_bytes',
  help: "Size of the store's LMDB file (db/data.mdb in the data dir), read at scrape.",
  registers: [registry],
  collect() {
    const s = safe(() => sources.dataDir && statSync(join(sources.dataDir, 'db', 'data.mdb')));
    this.set(s ? s.size : 0);
  },
});

function safe<T>(fn: () => T | '' | undefined): T | undefined {
  try {
    return fn() || undefined;
  } catch {
    return undefined;
  }
}

const guard = (fn: () => void): void => {
  try {
    fn();
  } catch {
    /* metrics never break what they measure */
  }
};

/** The recording calls. Every one is O(1) and swallows its own errors. */
export const metrics = {
  httpRequest(host: 'api' | 'verify' | 'site' | 'other', status: number): void {
    const key = `${host} ${status}`;
    counted.set(key, (counted.get(key) ?? 0) + 1);
  },
  proxyAnswered(seconds: number): void {
    latencies.push(seconds);
    if (latencies.length >= LATENCY_BATCH) guard(handOver);
  },
  woke(seconds: number, ok: boolean): void {
    guard(() => {
      wakes.inc({ result: ok ? 'ok' : 'failed' });
      if (ok) wakeLatency.observe(seconds);
    });
  },
  slept(): void {
    guard(() => sleeps.inc());
  },
  sshSession(): void {
    guard(() => sshSessions.inc());
  },
  sshLoginFailed(): void {
    guard(() => sshFailedLogins.inc());
  },
  payment(outcome: string): void {
    guard(() => payments.inc({ outcome }));
  },
  settlementTransfer(result: 'mined' | 'reverted' | 'withheld'): void {
    guard(() => transfers.inc({ result }));
  },
  llmPass(seconds: number, ok: boolean): void {
    guard(() => {
      llmPasses.inc({ result: ok ? 'ok' : 'failed' });
      llmLatency.observe(seconds);
    });
  },
  flowsDropped(bound: 'open' | 'rate', n: number): void {
    guard(() => flowsDropped.inc({ bound }, n));
  },
  forwarded(peer: string, outcome: string): void {
    const key = `${peer} ${outcome}`;
    forwardedCounts.set(key, (forwardedCounts.get(key) ?? 0) + 1);
  },
  channelError(peer: string, kind: string): void {
    guard(() => channelErrors.inc({ peer, kind }));
  },
  /** Registers a reader of the bytes `door` holds (read at scrape); the returned function removes it. */
  heldBytes(door: HeldDoor, read: () => number): () => void {
    let set = heldReaders.get(door);
    if (!set) heldReaders.set(door, (set = new Set()));
    const own = () => read();
    set.add(own);
    return () => void set.delete(own);
  },
  /** Registers a reader of the automatic-checkpoint backlog (read at scrape); the returned function removes it. */
  checkpointBacklog(read: () => number): () => void {
    const own = () => read();
    backlogReaders.add(own);
    return () => void backlogReaders.delete(own);
  },
  smsSent(provider: string, ok: boolean): void {
    guard(() => smsSends.inc({ provider, result: ok ? 'ok' : 'failed' }));
  },
};

/** Markdown table of every metric, for the README (checked by a test). */
export function metricsReference(): string {
  const rows = (registry.getMetricsAsArray() as unknown as { name: string; help: string; type: string; labelNames?: readonly string[] }[]).map(
    (m) => `| \`${m.name}\` | ${m.type} | ${(m.labelNames ?? []).map((l) => `\`${l}\``).join(', ')} | ${m.help.replace(/\|/g, '\\|')} |`,
  );
  return ['| metric | type | labels | meaning |', '|---|---|---|---|', ...rows].join('\n');
}
