// The daemon's SMS sender: the configured provider (twilio.ts or log.ts), each send counted by
// provider and result in the metrics.

import type { Logger } from '../log/index.js';
import { metrics } from '../metrics/index.js';
import { logSender } from './log.js';
import { twilioSender } from './twilio.js';
import type { SmsConfig, SmsSender } from './types.js';

export function createSmsSender(cfg: SmsConfig, log: Logger): SmsSender {
  return counted(cfg.provider === 'twilio' ? twilioSender(cfg, log) : logSender(log));
}

/** Counts each send by provider and result (rootbox_sms_sends_total). */
function counted(inner: SmsSender): SmsSender {
  return {
    name: inner.name,
    send: (to, text) =>
      inner.send(to, text).then(
        () => metrics.smsSent(inner.name, true),
        (e: unknown) => {
          metrics.smsSent(inner.name, false);
          throw e;
        },
      ),
  };
}
