// POST /create: the whole sign-up-and-create flow of spec part 4 — anonymous accounts, Bearer
// accounts, the two-step phone flow (verification_required, then code), never_sleep, the
// per-IP cap for anonymous accounts, host capacity (here, or sent to another host: hostchoice.ts),
// and the create answer. The server (and an anonymous account made for it) stays pending until
// the answer is ready: servers.commit() is its last step, so a crash before it leaves nothing a
// restart would keep (pending.ts).

import { AppError } from '../errors.js';
import type { Reply, RouteCtx } from '../http/index.js';
import { HANDLED } from '../http/index.js';
import { PublicUrls } from '../pages/index.js';
import type { AccountRecord } from '../store/index.js';
import type { HostingCore } from './core.js';
import type { Created } from './servers.js';
import { E164 } from './phone.js';
import { chooseCreateHost } from './hostchoice.js';
import type { CreateRequest } from './schemas.js';
import type { z } from 'zod';

/** The body and the caller (when a credential was sent) come validated by the route (routes.ts). */
export async function handleCreate(
  ctx: RouteCtx<AccountRecord | undefined, z.output<typeof CreateRequest> | undefined>,
  core: HostingCore,
): Promise<Reply | typeof HANDLED> {
  const body = ctx.body ?? {};
  let account = ctx.auth;
  let apiKey: string | undefined;
  let accountNote: string | undefined;
  let madeAccount: string | undefined;
  let heldAccount: string | undefined;

  if (body.code !== undefined && body.phone === undefined) {
    throw AppError.of('invalid_request', 'code: send it together with the phone it was texted to');
  }
  // a host without room for the tier hands the whole create to the one with the most (hostchoice.ts)
  if ((await chooseCreateHost(ctx, body, core.capacity, (p) => core.accounts.book.byPhone(p), core.hostChoice)) === HANDLED) return HANDLED;
  if (body.phone !== undefined) {
    const phone = body.phone.trim();
    if (!E164.test(phone)) throw AppError.of('invalid_phone', 'phone: must be an E.164 number like +14155550123');
    if (body.code === undefined) {
      const { expiresIn } = await core.phone.sendCode(phone, ctx.ip);
      return {
        status: 200,
        body: {
          verification_required: true,
          phone,
          expires_in: expiresIn,
          detail: `a 6-digit code was texted to ${phone}; send the same body again with "code" to finish. No server was created yet.`,
        },
      };
    }
    if (!/^\d{6}$/.test(body.code)) throw AppError.of('invalid_code', 'code: must be the 6 digits from the SMS');
    await core.phone.checkCode(phone, body.code);
    const known = await core.accounts.book.byPhone(phone);
    let attached: AccountRecord | undefined;
    if (known) {
      accountNote =
        account && account.id !== known.id
          ? `logged into the existing account of ${phone}, not the one of the api_key you sent`
          : `logged into the existing account of ${phone}`;
      account = known;
    } else if (account && !account.phone && (attached = await core.accounts.book.attachPhone(account.id, phone))) {
      account = attached;
      accountNote = 'phone verified and attached to your account; your api_key is unchanged';
      await core.servers.applyTier(account);
    } else {
      const made = await core.accounts.create(ctx.ip, phone);
      account = made.account;
      madeAccount = account.id;
      accountNote = `created a new verified account for ${phone}`;
    }
    apiKey = await core.accounts.keyOf(account);
  } else if (!account) {
    if ((await core.accounts.anonymousServersFromIp(ctx.ip)) >= core.cfg.hosting.anonServersPerIp) {
      throw AppError.of(
        'ip_limit',
        `anonymous accounts from this address already hold ${core.cfg.hosting.anonServersPerIp} servers; verify a phone ({"phone": "+…"}) to lift the limit`,
      );
    }
    const made = await core.accounts.create(ctx.ip, null, (a) => core.servers.pending.hold(a.id));
    account = made.account;
    apiKey = made.apiKey;
    madeAccount = heldAccount = account.id;
    accountNote = 'created a new anonymous account; keep the api_key, it is shown only now. Verify a phone to raise the limits.';
  } else if (!account.phone && (await core.accounts.anonymousServersFromIp(ctx.ip)) >= core.cfg.hosting.anonServersPerIp) {
    throw AppError.of(
      'ip_limit',
      `anonymous accounts from this address already hold ${core.cfg.hosting.anonServersPerIp} servers; verify a phone to lift the limit`,
    );
  }
  // A used-up grant with no credit gets the upgrade envelope, not a server paused 48 h later
  // (new accounts start with a fresh grant). A phone login still learns its api_key.
  const base = new PublicUrls(core.cfg.public).origin(ctx.req, ctx.scheme, ctx.host);
  if (!madeAccount) core.assertNotExhausted(account, base, apiKey ? { api_key: apiKey, account_note: accountNote } : undefined);

  let created: Created | undefined;
  try {
    if (body.never_sleep && !account.phone) {
      throw AppError.of('phone_required', 'never_sleep needs a verified phone: send {"phone": "+…"} first');
    }
    created = await core.servers.create(account, { subdomains: body.subdomains, neverSleep: body.never_sleep });
    const view = await core.servers.view(created.record, account);
    const answer = {
      status: 200,
      body: {
        ...view,
        ssh: `ssh -i ~/.ssh/${created.record.id} root@${core.cfg.public.sshHost ?? core.cfg.publicIp} -p ${core.sshPort()}`,
        ssh_private_key: created.privateKey,
        ...(apiKey ? { api_key: apiKey } : {}),
        ...(created.subdomainNote ? { subdomain_note: created.subdomainNote } : {}),
        ...(accountNote ? { account_note: accountNote } : {}),
      },
    };
    await core.servers.commit(created, heldAccount); // nothing may fail after this but writing the answer
    created = undefined;
    core.hostChoice?.changed(); // the other hosts read this host's room from its lease
    return answer;
  } catch (e) {
    if (created) await core.servers.abandon(created.record.id);
    if (madeAccount) core.servers.pending.dropAccount(madeAccount);
    throw e;
  }
}
