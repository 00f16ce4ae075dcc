// The outside peers of the self-settlement benchmark, in a process of their own so their work does
// not run on the daemon's event loop: an instant OpenAI-compatible server, an instant x402
// facilitator (for the comparison row) and an HTTP proxy in front of the RPC (anvil). Both record each request's busy interval on the shared wall clock
// (performance.timeOrigin + now, ms), the proxy also which one sent the transfer and which receipt
// poll found it; GET /__busy on the proxy returns and clears them, with the end of the last LLM
// answer. Prints {"llm": url, "rpc": url, "fac": url} once listening.
// Usage: node bench/verify/peers.mjs <rpc target url>

import { createServer, request } from 'node:http';

const target = new URL(process.argv[2]);
const now = () => performance.timeOrigin + performance.now();
let busy = [];
let lastLlm = 0;

const llm = createServer((req, res) => {
  const start = now();
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        id: 'x',
        object: 'chat.completion',
        created: 0,
        model: 'm',
        choices: [{ index: 0, message: { role: 'assistant', content: '{"reasoning":"Fine. It checks out.","verdict":"pass"}' }, finish_reason: 'stop' }],
      }),
    );
    const end = now();
    busy.push([start, end]);
    lastLlm = Math.max(lastLlm, end);
  });
});

let tx = 0;
/** An instant x402 facilitator (the facilitator row, for comparison). */
const fac = createServer((req, res) => {
  const start = now();
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const b = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : {};
    const out =
      req.url === '/supported'
        ? { kinds: [{ x402Version: 2, scheme: 'exact', network: 'eip155:31337' }], extensions: [], signers: {} }
        : req.url === '/verify'
          ? { isValid: true, payer: b.paymentPayload.payload.authorization.from }
          : {
              success: true,
              transaction: '0x' + (++tx).toString(16).padStart(64, '0'),
              network: 'eip155:31337',
              payer: b.paymentPayload.payload.authorization.from,
            };
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(out));
    busy.push([start, now()]);
  });
});

const proxy = createServer((req, res) => {
  if (req.url === '/__busy') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ busy, lastLlm }));
    busy = [];
    lastLlm = 0;
    return;
  }
  const start = now();
  const sent = [];
  const got = [];
  const up = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
    res.writeHead(r.statusCode ?? 502, r.headers);
    r.on('data', (c) => (got.push(c), res.write(c)));
    r.on('end', () => {
      res.end();
      const q = Buffer.concat(sent).toString();
      const a = Buffer.concat(got).toString();
      // the sending of the transfer, and the receipt poll that found it: the wait between is the chain's (block inclusion)
      const tag = q.includes('eth_sendRawTransaction')
        ? 'send'
        : q.includes('eth_getTransactionReceipt') && !a.includes('"result":null')
          ? 'receipt'
          : undefined;
      busy.push([start, now(), tag]);
    });
  });
  up.on('error', () => res.destroy());
  req.on('data', (c) => (sent.push(c), up.write(c)));
  req.on('end', () => up.end());
});

const listen = (s) => new Promise((r) => s.listen(0, '127.0.0.1', () => r(`http://127.0.0.1:${s.address().port}`)));
const urls = { llm: await listen(llm), rpc: await listen(proxy), fac: await listen(fac) };
process.stdout.write(JSON.stringify(urls) + '\n');
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
