// Running out and coming back: an account whose grant part is used up and whose balance is
// not positive is marked exhausted; `suspendAfter` later its servers are suspended (stopped,
// `suspended: true`). Credit or a verified phone clears it and the servers start again, except
// those an operator suspended, which stay suspended until the operator resumes them. In cluster
// mode a server the registry moved to another host or deleted meanwhile is not started: the
// runtime's start refuses it (its start guard, the registry's wake fence), and the refusal is logged.

import { isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { Runtime } from '../runtime/index.js';
import type { AccountRecord, Store } from '../store/index.js';
import { isExhausted, type Credits } from './credits.js';

/** The flag of a server an operator suspended (`rootbox servers suspend`, src/admin/). */
export const OPERATOR_SUSPENDED = 'suspended_by_operator';

export interface EnforceDeps {
  store: Store;
  runtime: Pick<Runtime, 'stop' | 'start'>;
  credits(a: AccountRecord): Credits;
  suspendAfterMs: number;
  log: Logger;
}

export async function enforce(d: EnforceDeps, now: number): Promise<void> {
  for (const account of d.store.accounts.all()) {
    const servers = d.store.servers.listByAccount(account.id);
    const state = d.store.billing.stateOf(account.id);
    const exhausted = isExhausted(d.credits(account));
    if (exhausted && state.exhaustedAt === undefined) {
      d.store.billing.setState(account.id, { ...state, exhaustedAt: now });
      d.log.info('account exhausted its grant and balance', { account: account.id });
      continue;
    }
    if (exhausted && !state.suspended && now - state.exhaustedAt! >= d.suspendAfterMs) {
      d.store.billing.setState(account.id, { ...state, suspended: true });
      for (const s of servers) {
        d.store.servers.update(s.id, () => ({ suspended: true }));
        await d.runtime.stop(s.id, { park: false }).catch((e) => d.log.warn('suspend: stop failed', { id: s.id, err: (e as Error).message }));
      }
      d.log.info('account suspended', { account: account.id, servers: servers.length });
      continue;
    }
    if (!exhausted && (state.exhaustedAt !== undefined || state.suspended)) {
      d.store.billing.setState(account.id, {});
      if (state.suspended) {
        for (const s of servers) {
          if (s.flag === OPERATOR_SUSPENDED) continue; // the operator's suspension outlasts billing's
          d.store.servers.update(s.id, () => ({ suspended: false }));
          await d.runtime
            .start(s.id)
            .catch((e) => d.log.warn('unsuspend: start failed', { id: s.id, code: isAppError(e) ? e.code : undefined, err: (e as Error).message }));
        }
        d.log.info('account back in good standing; servers resumed', { account: account.id });
      }
    }
  }
}
