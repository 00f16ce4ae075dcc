// `rootbox accounts list|show|credit|rotate-key|revoke`. list and show answer from the daemon,
// or from the store while it is stopped (list: in cluster mode, the registry's accounts); credit goes through the daemon or, stopped, into the
// store (commands.ts); rotate-key and revoke act in the running daemon and refuse without it.

import type { Config } from '../config/index.js';
import { AppError } from '../errors.js';
import { RegistryAccounts, RegistryPool, type SharedAccount } from '../registry/index.js';
import type { CliFlags, CliOut } from './cli-io.js';
import { ask, needDaemon, ok, withStore } from './cli-link.js';
import { creditCommand } from './commands.js';
import { block, day, table } from './table.js';
import { accountView, findAccount, ledgerView, serverView, type AccountView } from './views.js';

function accountTable(accounts: AccountView[]): string {
  if (!accounts.length) return 'no accounts';
  return table(
    ['ID', 'TIER', 'BALANCE', 'RAM GB-H LEFT', 'EGRESS GB LEFT', 'SERVERS', 'PHONE', 'STANDING', 'CREATED'],
    accounts.map((a) => [
      a.id,
      a.tier,
      `$${a.balance_usd}`,
      a.ram_gb_hours_left,
      a.egress_gb_left,
      a.servers.length,
      a.phone,
      a.suspended_by_billing ? 'suspended' : a.exhausted_since ? 'exhausted' : 'ok',
      day(a.created_at),
    ]),
  );
}

async function registryAccounts(cfg: Readonly<Config>): Promise<SharedAccount[]> {
  const pool = new RegistryPool({
    url: cfg.cluster.registry!,
    connectTimeoutMs: cfg.cluster.connectTimeout,
    statementTimeoutMs: cfg.cluster.statementTimeout,
    max: 1,
  });
  try {
    return await new RegistryAccounts(pool, cfg.cluster.host ?? '').all();
  } finally {
    await pool.end();
  }
}

export async function accountsCommand(cfg: Readonly<Config>, sub: string | undefined, args: string[], flags: CliFlags, io: CliOut): Promise<number> {
  const dir = cfg.dataDir;
  const emit = (body: unknown, human: () => string) => io.out(flags.json ? JSON.stringify(body, null, 2) : human());
  if (sub === 'list' && args.length === 0) {
    const a = await ask(dir, 'GET', '/accounts');
    let body: { accounts: AccountView[] };
    if (a) body = ok(a);
    else {
      // cluster mode: every account of the registry (this host's cache knows only those it saw)
      const shared = cfg.cluster.registry ? await registryAccounts(cfg) : undefined;
      body = await withStore(cfg, io, (v) => ({
        accounts: (shared?.map((a) => ({ ...a, balanceUsd: v.store.accounts.get(a.id)?.balanceUsd ?? 0 })) ?? v.store.accounts.all()).map((x) =>
          accountView(v, x),
        ),
      }));
    }
    emit(body, () => accountTable(body.accounts));
    return 0;
  }
  if (sub === 'show' && args.length === 1) {
    const a = await ask(dir, 'GET', `/accounts/${encodeURIComponent(args[0])}`);
    let body: Record<string, unknown>;
    if (a) body = ok(a);
    else {
      body = await withStore(cfg, io, (v) => {
        const acc = findAccount(v.store, cfg.domain, args[0]);
        if (!acc) throw AppError.of('unknown_target', `no account ${args[0].slice(0, 80)}`);
        return {
          account: accountView(v, acc),
          servers: v.store.servers.listByAccount(acc.id).map((s) => serverView(v, s)),
          ledger: ledgerView(v.store, acc.id),
        };
      });
    }
    emit(body, () => block(body));
    return 0;
  }
  if (sub === 'credit' && args.length === 2) {
    const text = await creditCommand(dir, args[0], args[1], Boolean(cfg.cluster.registry));
    io.out(flags.json ? JSON.stringify({ ok: true, detail: text }) : text);
    return 0;
  }
  if ((sub === 'rotate-key' || sub === 'revoke') && args.length === 1) {
    const a = await ask(dir, 'POST', `/accounts/${encodeURIComponent(args[0])}/${sub}`);
    if (!a) needDaemon(dir, `accounts ${sub}`);
    const body = ok<{ account: string; api_key?: string }>(a);
    emit(body, () =>
      sub === 'revoke'
        ? `the api_key of ${body.account} no longer works (401 revoked_api_key); \`rootbox accounts rotate-key ${body.account}\` makes one to hand over`
        : `new api_key of ${body.account} (the old one no longer works):\n${body.api_key}`,
    );
    return 0;
  }
  return -1;
}
