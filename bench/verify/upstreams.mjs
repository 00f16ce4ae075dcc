// The outside services of the verification benchmark (verify.bench.ts), in a process of their own
// so their work does not run on the daemon's event loop (in production they are other machines):
// an OpenAI-compatible server answering every pass at once, or after a delay per model that
// POST /__delay {"m9": 300, "*": 100} sets ({} for instant again), and an instant x402
// facilitator (verify, settle, supported on Base). Prints {"llm": url, "fac": url} once listening.
// Usage: node bench/verify/upstreams.mjs

import { createServer } from 'node:http';

let delays = {};
let tx = 0;

function server(handle) {
  const s = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : {};
      const { json, delay } = handle(req.url ?? '', body);
      const send = () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(json));
      delay ? setTimeout(send, delay) : send();
    });
  });
  return new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${s.address().port}`)));
}

const llm = await server((path, b) => {
  if (path === '/__delay') return ((delays = b), { json: {} });
  return {
    delay: delays[b.model] ?? delays['*'] ?? 0,
    json: {
      id: 'x',
      object: 'chat.completion',
      created: 0,
      model: b.model,
      choices: [{ index: 0, message: { role: 'assistant', content: '{"reasoning":"Fine. It checks out.","verdict":"pass"}' }, finish_reason: 'stop' }],
    },
  };
});

const fac = await server((path, b) => ({
  json:
    path === '/supported'
      ? { kinds: [{ x402Version: 2, scheme: 'exact', network: 'eip155:8453' }], extensions: [], signers: {} }
      : path === '/verify'
        ? { isValid: true, payer: b.paymentPayload.payload.authorization.from }
        : {
            success: true,
            transaction: '0x' + (++tx).toString(16).padStart(64, '0'),
            network: b.paymentRequirements.network,
            payer: b.paymentPayload.payload.authorization.from,
          },
}));

console.log(JSON.stringify({ llm, fac }));
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
