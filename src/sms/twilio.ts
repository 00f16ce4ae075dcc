// The `twilio` SMS provider: its real Messages API over HTTPS (base URL configurable), a
// messaging service (MG…) or a sender number; an unreachable or refusing provider answered as
// sms_failed, a number it refuses (400) as sms_rejected, its reason logged, never the token.

import { AppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { SmsConfig, SmsSender } from './types.js';

export function twilioSender(cfg: SmsConfig, log: Logger, timeoutMs = 10_000): SmsSender {
  const { twilioAccountSid: sid, twilioAuthToken: token, twilioFrom: from } = cfg;
  return {
    name: 'twilio',
    async send(to, text) {
      if (!sid || !token || !from) {
        throw AppError.of('not_configured', 'SMS is not configured on this host (Twilio account, token or sender missing)');
      }
      const form = new URLSearchParams({ To: to, Body: text });
      form.set(from.startsWith('MG') ? 'MessagingServiceSid' : 'From', from);
      const url = `${cfg.twilioBaseUrl.replace(/\/$/, '')}/2010-04-01/Accounts/${encodeURIComponent(sid)}/Messages.json`;
      let res: Response;
      try {
        res = await fetch(url, {
          method: 'POST',
          headers: { authorization: `Basic ${Buffer.from(`${sid}:${token}`).toString('base64')}`, 'content-type': 'application/x-www-form-urlencoded' },
          body: form,
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (e) {
        log.warn('sms provider unreachable', { provider: 'twilio', err: (e as Error).message });
        throw AppError.of('sms_failed', 'the SMS provider could not be reached; try again in a minute');
      }
      const body = (await res.text().catch(() => '')).slice(0, 2000);
      if (res.status !== 201 && res.status !== 200) {
        let reason = `status ${res.status}`;
        try {
          const j = JSON.parse(body) as { code?: number; message?: string };
          if (j.message) reason = `${j.code ?? res.status}: ${j.message}`;
        } catch {
          /* not JSON */
        }
        log.warn('sms provider refused the message', { provider: 'twilio', status: res.status, reason });
        if (res.status === 400) throw AppError.of('sms_rejected', `the SMS provider refused this number (${reason})`);
        throw AppError.of('sms_failed', 'the SMS provider failed to send the code; try again in a minute');
      }
    },
  };
}
