// The store opened (openStore): one LMDB environment in the data dir, migrated to this version,
// and every typed area over it, with the transactions that span areas (atomically, a create's
// commit, a delete's mark) and the close that flushes the counters first.

import { AccountStore } from './accounts.js';
import { BillingStore } from './billing.js';
import { CertificateStore } from './certificates.js';
import { CheckpointStore } from './checkpoints.js';
import { CodeStore } from './codes.js';
import { DomainStore } from './domains.js';
import { ExposureStore } from './exposures.js';
import { openEnv, type LmdbEnv } from './db.js';
import { FeedbackStore } from './feedback.js';
import { JoinStore } from './joined.js';
import { migrations } from './migrations.js';
import { PaymentStore } from './payments.js';
import { RuntimeStore } from './runtime.js';
import { ServerStore, type ServerRecord } from './servers.js';
import { StatsStore } from './stats.js';

export interface Store {
  readonly feedback: FeedbackStore;
  readonly stats: StatsStore;
  readonly servers: ServerStore;
  readonly runtime: RuntimeStore;
  readonly accounts: AccountStore;
  readonly codes: CodeStore;
  readonly exposures: ExposureStore;
  readonly billing: BillingStore;
  readonly payments: PaymentStore;
  readonly certificates: CertificateStore;
  readonly domains: DomainStore;
  /** Whether this box's shared records were copied into the cluster registry (registry/join.ts). */
  readonly joined: JoinStore;
  readonly checkpoints: CheckpointStore;
  /** Schema version the store is at after migrations. */
  readonly schemaVersion: number;
  /** Runs fn in one synchronous, synced write transaction: the writes of every area it calls
   *  commit together (nested area transactions become child transactions) or not at all. */
  atomically<T>(fn: () => T): T;
  /** Commits a pending create in one synced transaction: the server record and the runtime
   *  record lose their pending mark and the made account (if any) its hold. False (nothing
   *  written) when the create no longer stands (record gone or past its deadline). */
  commitCreate(id: string, madeAccount?: string): boolean;
  /** Marks a server and its runtime record as being deleted, in one synced transaction;
   *  undefined when there is no such server. */
  beginDelete(id: string, by: string, until: number): ServerRecord | undefined;
  close(): Promise<void>;
}

export function openStore(dataDir: string): Store {
  const env: LmdbEnv = openEnv(dataDir, migrations);
  const stats = new StatsStore(env);
  const servers = new ServerStore(env);
  const runtime = new RuntimeStore(env);
  const accounts = new AccountStore(env);
  const payments = new PaymentStore(env);
  return {
    feedback: new FeedbackStore(env),
    stats,
    servers,
    runtime,
    accounts,
    codes: new CodeStore(env),
    exposures: new ExposureStore(env),
    billing: new BillingStore(env, accounts),
    payments,
    certificates: new CertificateStore(env),
    domains: new DomainStore(env),
    joined: new JoinStore(env),
    checkpoints: new CheckpointStore(env),
    schemaVersion: env.db<number>('meta').get('schemaVersion') ?? 0,
    atomically: (fn) => env.txSync(fn),
    commitCreate: (id, madeAccount) =>
      env.txSync(() => {
        if (!servers.commit(id)) return false;
        runtime.commit(id);
        if (madeAccount) servers.releaseHold(madeAccount);
        return true;
      }),
    beginDelete: (id, by, until) =>
      env.txSync(() => {
        const rec = servers.markDeleting(id, by, until);
        if (rec) runtime.doom(id, until);
        return rec;
      }),
    async close() {
      await stats.flush();
      payments.close();
      await env.close();
    },
  };
}
