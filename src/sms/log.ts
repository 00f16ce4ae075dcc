// The `log` SMS provider: the text written to the daemon log instead of sent, so an operator can
// test phone sign-up without a provider.

import type { Logger } from '../log/index.js';
import type { SmsSender } from './types.js';

export function logSender(log: Logger): SmsSender {
  return {
    name: 'log',
    async send(to, text) {
      log.info('sms (log provider): not sent, written here for the operator', { to, text });
    },
  };
}
