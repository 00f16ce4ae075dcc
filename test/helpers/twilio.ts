// A local server speaking Twilio's Messages API (POST /2010-04-01/Accounts/{Sid}/Messages.json,
// HTTP Basic auth with the account SID and auth token, form-encoded To/From/Body, 201 with the
// message resource; errors as Twilio's JSON error body). It captures messages and can be told
// to fail the next requests in Twilio's ways.

import { createServer, type Server } from 'node:http';

export interface SentSms {
  to: string;
  from?: string;
  messagingServiceSid?: string;
  body: string;
}

export type TwilioMode = 'ok' | 'server_error' | 'invalid_number' | 'hang' | 'garbage';

export interface FakeTwilio {
  url: string;
  sid: string;
  token: string;
  messages: SentSms[];
  mode: TwilioMode;
  /** The last 6-digit code texted to a number. */
  codeFor(phone: string): string | undefined;
  close(): Promise<void>;
}

export async function startTwilio(): Promise<FakeTwilio> {
  const sid = 'AC' + '0123456789abcdef'.repeat(2);
  const token = 'tok_' + Math.random().toString(36).slice(2);
  const state: FakeTwilio = {
    url: '',
    sid,
    token,
    messages: [],
    mode: 'ok',
    codeFor: (phone) => {
      const m = [...state.messages].reverse().find((x) => x.to === phone);
      return m ? /\b(\d{6})\b/.exec(m.body)?.[1] : undefined;
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.method !== 'POST' || req.url !== `/2010-04-01/Accounts/${sid}/Messages.json`)
        return send(404, { code: 20404, message: 'The requested resource was not found', status: 404 });
      if (req.headers.authorization !== `Basic ${Buffer.from(`${sid}:${token}`).toString('base64')}`)
        return send(401, { code: 20003, message: 'Authenticate', status: 401 });
      const form = new URLSearchParams(raw);
      if (state.mode === 'hang') return;
      if (state.mode === 'server_error') return send(500, { code: 20500, message: 'Internal Server Error', status: 500 });
      if (state.mode === 'garbage') {
        res.writeHead(201, { 'content-type': 'application/json' });
        return res.end('{"sid": ');
      }
      const to = form.get('To') ?? '';
      if (state.mode === 'invalid_number' || !/^\+\d+$/.test(to))
        return send(400, { code: 21211, message: `The 'To' number ${to} is not a valid phone number.`, status: 400 });
      if (!form.get('Body') || (!form.get('From') && !form.get('MessagingServiceSid')))
        return send(400, { code: 21603, message: "A 'From' or 'MessagingServiceSid' parameter is required", status: 400 });
      const msg: SentSms = {
        to,
        from: form.get('From') ?? undefined,
        messagingServiceSid: form.get('MessagingServiceSid') ?? undefined,
        body: form.get('Body')!,
      };
      state.messages.push(msg);
      send(201, {
        sid: 'SM' + Math.random().toString(16).slice(2).padEnd(32, '0'),
        account_sid: sid,
        to,
        from: msg.from,
        body: msg.body,
        status: 'queued',
        num_segments: '1',
        direction: 'outbound-api',
        error_code: null,
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  state.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return state;
}
