// SMS port: sends a text to a phone number. Two providers: `twilio` (its real Messages API over
// HTTPS, base URL configurable) and `log` (writes the text to the daemon log so an operator can
// test phone sign-up without a provider). The sender the daemon uses is made in sender.ts.

export type { SmsConfig, SmsSender } from './types.js';
export { logSender } from './log.js';
export { twilioSender } from './twilio.js';
export { createSmsSender } from './sender.js';
