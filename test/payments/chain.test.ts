// The hand-written parts of the chain port: calldata equal to viem's encodeFunctionData (and
// refused outside its types), and the lean JSON-RPC client against a local server that answers
// results, error objects, out-of-order batches, HTTP errors, garbage and nothing at all.

import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, type Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import { encodeFunctionData, getAddress, type Hex } from 'viem';
import { authorizationStateData, balanceOfData, EIP3009_ABI, transferData, type TransferCall } from '../../src/payments/chain.js';
import { JsonRpc, RpcError, RpcUnreachable } from '../../src/payments/rpc.js';

const hex = (n: number) => `0x${randomBytes(n).toString('hex')}` as Hex;
const addr = () => getAddress(hex(20));

test('transferData, authorizationStateData and balanceOfData equal viem encodeFunctionData', () => {
  for (let i = 0; i < 50; i++) {
    const v = [0, 1, 27, 28][i % 4];
    const r = hex(32);
    const s = hex(32);
    const t: TransferCall = {
      from: addr(),
      to: i % 2 ? addr() : (addr().toLowerCase() as Hex),
      value: BigInt(hex(i % 3 ? 8 : 32)),
      validAfter: BigInt(i),
      validBefore: 2n ** 64n + BigInt(i),
      nonce: hex(32),
      signature: `${r}${s.slice(2)}${v.toString(16).padStart(2, '0')}` as Hex,
    };
    const args = [getAddress(t.from), getAddress(t.to), t.value, t.validAfter, t.validBefore, t.nonce, v < 27 ? v + 27 : v, r, s] as const;
    assert.is(transferData(t), encodeFunctionData({ abi: EIP3009_ABI, functionName: 'transferWithAuthorization', args }));
    assert.is(authorizationStateData(t.from, t.nonce), encodeFunctionData({ abi: EIP3009_ABI, functionName: 'authorizationState', args: [t.from, t.nonce] }));
    assert.is(balanceOfData(t.from), encodeFunctionData({ abi: EIP3009_ABI, functionName: 'balanceOf', args: [t.from] }));
  }
});

test('calldata outside its types is refused', () => {
  const ok: TransferCall = { from: addr(), to: addr(), value: 1n, validAfter: 0n, validBefore: 1n, nonce: hex(32), signature: hex(65) };
  transferData(ok);
  assert.throws(() => transferData({ ...ok, value: -1n }), /out of range/);
  assert.throws(() => transferData({ ...ok, validBefore: 2n ** 256n }), /out of range/);
  assert.throws(() => transferData({ ...ok, nonce: hex(31) }), /32 bytes/);
  assert.throws(() => transferData({ ...ok, from: hex(21) }), /address/);
  assert.throws(() => transferData({ ...ok, signature: hex(64) }), /65-byte/);
  assert.throws(() => balanceOfData('0xzz' as Hex), /address/);
});

let server: Server;
let url = '';
let answer: (body: any) => { status?: number; text?: string; json?: unknown } | undefined;

test.before(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const a = answer(JSON.parse(Buffer.concat(chunks).toString()));
      if (!a) return; // no answer at all
      res.writeHead(a.status ?? 200, { 'content-type': 'application/json' }).end(a.text ?? JSON.stringify(a.json));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
test.after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

test('a call returns its result; an error answer is RpcError with the code, message and data', async () => {
  const rpc = new JsonRpc(url, 2000);
  answer = (b) => ({ json: { jsonrpc: '2.0', id: b.id, result: `${b.method}:${b.params.length}` } });
  assert.is(await rpc.call('eth_chainId', []), 'eth_chainId:0');
  answer = (b) => ({ json: { jsonrpc: '2.0', id: b.id, error: { code: 3, message: 'execution reverted: EIP3009: invalid signature', data: '0x08c379a0' } } });
  const e = (await rpc.call('eth_estimateGas', [{}]).catch((x: unknown) => x)) as RpcError;
  assert.instance(e, RpcError);
  assert.is(e.code, 3);
  assert.is(e.data, '0x08c379a0');
  assert.match(e.message, /invalid signature/);
});

test('a batch is matched by id whatever the order of the answers; each error stays with its call', async () => {
  const rpc = new JsonRpc(url, 2000);
  answer = (b: any[]) => ({
    json: b
      .map((c) =>
        c.method === 'bad' ? { jsonrpc: '2.0', id: c.id, error: { code: -32000, message: 'nope' } } : { jsonrpc: '2.0', id: c.id, result: c.params[0] },
      )
      .reverse(),
  });
  const out = await rpc.batch([
    { method: 'a', params: [1] },
    { method: 'bad', params: [] },
    { method: 'c', params: [3] },
  ]);
  assert.equal(out[0], { ok: true, result: 1 });
  assert.is(out[1].ok, false);
  assert.is(!out[1].ok && out[1].error.message, 'nope');
  assert.equal(out[2], { ok: true, result: 3 });
});

test('HTTP errors, garbage, a missing answer in a batch, a refused connection and a timeout are RpcUnreachable', async () => {
  const rpc = new JsonRpc(url, 300);
  const unreachable = async (p: Promise<unknown>, re: RegExp) => {
    const e = (await p.catch((x: unknown) => x)) as Error;
    assert.instance(e, RpcUnreachable);
    assert.match(e.message, re);
  };
  answer = () => ({ status: 429, json: { error: 'slow down' } });
  await unreachable(rpc.call('eth_call', []), /HTTP 429/);
  answer = () => ({ text: '<html>' });
  await unreachable(rpc.call('eth_call', []), /not JSON/);
  answer = (b) => ({ json: { jsonrpc: '2.0', id: b.id } });
  await unreachable(rpc.call('eth_call', []), /not JSON-RPC/);
  answer = (b: any[]) => ({ json: [{ jsonrpc: '2.0', id: b[0].id, result: '0x1' }] });
  await unreachable(
    rpc.batch([
      { method: 'x', params: [] },
      { method: 'y', params: [] },
    ]),
    /not JSON-RPC/,
  );
  answer = () => undefined;
  await unreachable(rpc.call('eth_getTransactionReceipt', []), /within 300 ms/);
  const closed = createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const port = (closed.address() as { port: number }).port;
  await new Promise((r) => closed.close(r));
  await unreachable(new JsonRpc(`http://127.0.0.1:${port}`, 300).call('eth_chainId', []), /ECONNREFUSED/);
});

test.run();
