// The SMS port's shapes: a sender (one provider) and the config it is made from (hosting.sms).

export interface SmsSender {
  readonly name: string;
  send(to: string, text: string): Promise<void>;
}

export interface SmsConfig {
  provider: 'log' | 'twilio';
  twilioBaseUrl: string;
  twilioAccountSid?: string;
  twilioAuthToken?: string;
  twilioFrom?: string;
}
