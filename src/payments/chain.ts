// The chain port of self-settlement and its implementation over one JSON-RPC URL: reads of the
// EIP-3009 token (EIP-712 domain separator, balance, authorizationState, AuthorizationUsed logs),
// the preflight before the work (authorizationState, balance and an eth_estimateGas of
// transferWithAuthorization from the gas wallet — it reverts exactly as an eth_call simulation
// would — in one JSON-RPC batch), the gas wallet's balance and next nonce, fees, broadcasting a
// signed raw transaction and its receipt. The calls on a paid request's path (preflight, send,
// receipt, nonce, estimate) are written by hand: calldata of fixed ABI words, JSON-RPC over
// src/net's leanPost (rpc.ts); the rare ones (fees, logs, health reads) go through viem's client.
// RpcUnreachable marks answers that never came (transport), as opposed to reverts.

import {
  createPublicClient,
  http,
  parseAbi,
  toFunctionSelector,
  BaseError,
  getAddress,
  HttpRequestError,
  TimeoutError,
  type Hex,
  type PublicClient,
} from 'viem';
import { leanFetch } from '../net/index.js';
import { JsonRpc, RpcError, RpcUnreachable } from './rpc.js';

export { RpcUnreachable, RpcError } from './rpc.js';

export const EIP3009_ABI = parseAbi([
  'function balanceOf(address) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
]);

export interface TransferCall {
  from: Hex;
  to: Hex;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: Hex;
  signature: Hex;
}

export interface Receipt {
  status: 'success' | 'reverted';
  blockNumber: bigint;
}

/** The chain's view of a transfer before the work. */
export interface Preflight {
  used: boolean;
  balance: bigint;
  /** The gas transferWithAuthorization takes from the gas wallet now; null when it would revert. */
  gas: bigint | null;
  /** The revert's message when it would revert. */
  revert: string | null;
}

/** What self-settlement needs from the chain. */
export interface Chain {
  chainId(): Promise<number>;
  domainSeparator(): Promise<Hex>;
  balanceOf(owner: Hex): Promise<bigint>;
  authorizationUsed(authorizer: Hex, nonce: Hex): Promise<boolean>;
  /** authorizationState, balanceOf and the gas estimate of the transfer from `sender`, in one request. */
  preflight(sender: Hex, t: TransferCall): Promise<Preflight>;
  /** authorizationState and the payer's balanceOf, in one request (the re-check before a broadcast). */
  payerState(t: TransferCall): Promise<{ used: boolean; balance: bigint }>;
  nativeBalance(owner: Hex): Promise<bigint>;
  pendingNonce(owner: Hex): Promise<number>;
  fees(): Promise<{ maxFeePerGas: bigint; maxPriorityFeePerGas: bigint }>;
  /** Throws RpcError when the transfer would revert. */
  estimateGas(sender: Hex, t: TransferCall): Promise<bigint>;
  sendRaw(raw: Hex): Promise<Hex>;
  /** null while not mined (or unknown to the node). */
  receipt(hash: Hex): Promise<Receipt | null>;
  /** Whether the node knows the transaction (mined or in its pool). */
  knows(hash: Hex): Promise<boolean>;
  /** The transaction that used the authorization (its AuthorizationUsed log), searched in recent blocks. */
  usedBy(authorizer: Hex, nonce: Hex): Promise<Hex | null>;
}

/** How long a fee estimate is reused (two seconds: one Base block). */
export const FEE_CACHE_MS = 2000;

/** How far back AuthorizationUsed logs are searched (an authorization lives at most about an hour). */
export const LOG_LOOKBACK_BLOCKS = 10_000n;

const SELECTOR = {
  balanceOf: toFunctionSelector(EIP3009_ABI[0]),
  authorizationState: toFunctionSelector(EIP3009_ABI[1]),
  transferWithAuthorization: toFunctionSelector(EIP3009_ABI[3]),
};
const UINT256_MAX = 2n ** 256n - 1n;
const uint = (n: bigint) => {
  if (n < 0n || n > UINT256_MAX) throw new Error('uint256 out of range');
  return n.toString(16).padStart(64, '0');
};
const address = (a: Hex) => {
  if (!/^0x[0-9a-fA-F]{40}$/.test(a)) throw new Error(`not an address: ${a}`);
  return a.slice(2).toLowerCase().padStart(64, '0');
};
const bytes32 = (b: string) => {
  if (!/^[0-9a-fA-F]{64}$/.test(b)) throw new Error('not 32 bytes');
  return b.toLowerCase();
};

/** The calldata of transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, v, r, s):
 *  the selector and nine static 32-byte words (what viem's encodeFunctionData writes). */
export function transferData(t: TransferCall): Hex {
  const sig = t.signature.slice(2);
  if (!/^[0-9a-fA-F]{130}$/.test(sig)) throw new Error('not a 65-byte signature');
  let v = parseInt(sig.slice(128, 130), 16);
  if (v < 27) v += 27;
  return `${SELECTOR.transferWithAuthorization}${address(t.from)}${address(t.to)}${uint(t.value)}${uint(t.validAfter)}${uint(t.validBefore)}${bytes32(t.nonce.slice(2))}${uint(BigInt(v))}${bytes32(sig.slice(0, 64))}${bytes32(sig.slice(64, 128))}`;
}

/** The calldata of authorizationState(authorizer, nonce) and balanceOf(owner). */
export const authorizationStateData = (authorizer: Hex, nonce: Hex): Hex => `${SELECTOR.authorizationState}${address(authorizer)}${bytes32(nonce.slice(2))}`;
export const balanceOfData = (owner: Hex): Hex => `${SELECTOR.balanceOf}${address(owner)}`;

/** One ABI word of an eth_call answer (a bool or a uint256). */
function word(method: string, x: unknown): bigint {
  if (typeof x !== 'string' || !/^0x[0-9a-fA-F]{64}$/.test(x))
    throw new RpcError(method, 0, `${method}: the token answered ${String(x).slice(0, 80)}, not one word`);
  return BigInt(x);
}
const quantity = (method: string, x: unknown): bigint => {
  if (typeof x !== 'string' || !/^0x[0-9a-fA-F]{1,64}$/.test(x)) throw new RpcError(method, 0, `${method}: not a quantity: ${String(x).slice(0, 80)}`);
  return BigInt(x);
};

const isTransport = (e: unknown) => e instanceof BaseError && e.walk((x) => x instanceof HttpRequestError || x instanceof TimeoutError) !== null;

export class RpcChain implements Chain {
  private readonly rpc: JsonRpc;
  /** viem's client, for the calls off a paid request's path (fees, logs, health reads). */
  private readonly client: PublicClient;
  private readonly token: Hex;

  constructor(rpcUrl: string, token: Hex, timeoutMs: number) {
    this.token = getAddress(token);
    this.rpc = new JsonRpc(rpcUrl, timeoutMs);
    this.client = createPublicClient({ transport: http(rpcUrl, { timeout: timeoutMs, retryCount: 0, fetchFn: leanFetch }) }) as PublicClient;
  }

  private async viem<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      if (isTransport(e) || !(e instanceof BaseError)) throw new RpcUnreachable(what, e);
      throw e;
    }
  }

  private readCall = (data: Hex) => ({ method: 'eth_call', params: [{ to: this.token, data }, 'latest'] });
  private read = (data: Hex) => this.rpc.call('eth_call', this.readCall(data).params);
  private estimateCall = (sender: Hex, t: TransferCall) => ({ method: 'eth_estimateGas', params: [{ from: sender, to: this.token, data: transferData(t) }] });

  chainId = () => this.rpc.call<string>('eth_chainId', []).then((x) => Number(quantity('eth_chainId', x)));
  domainSeparator = () =>
    this.viem('DOMAIN_SEPARATOR', () => this.client.readContract({ address: this.token, abi: EIP3009_ABI, functionName: 'DOMAIN_SEPARATOR' }));
  balanceOf = async (owner: Hex) => word('balanceOf', await this.read(balanceOfData(owner)));
  authorizationUsed = async (authorizer: Hex, nonce: Hex) => word('authorizationState', await this.read(authorizationStateData(authorizer, nonce))) !== 0n;
  nativeBalance = async (owner: Hex) => quantity('eth_getBalance', await this.rpc.call('eth_getBalance', [owner, 'latest']));
  pendingNonce = async (owner: Hex) => Number(quantity('eth_getTransactionCount', await this.rpc.call('eth_getTransactionCount', [owner, 'pending'])));
  sendRaw = (raw: Hex) => this.rpc.call<Hex>('eth_sendRawTransaction', [raw]);
  estimateGas = async (sender: Hex, t: TransferCall) => {
    const c = this.estimateCall(sender, t);
    return quantity(c.method, await this.rpc.call(c.method, c.params));
  };

  async preflight(sender: Hex, t: TransferCall): Promise<Preflight> {
    const [used, balance, gas] = await this.rpc.batch([
      this.readCall(authorizationStateData(t.from, t.nonce)),
      this.readCall(balanceOfData(t.from)),
      this.estimateCall(sender, t),
    ]);
    if (!used.ok) throw used.error;
    if (!balance.ok) throw balance.error;
    return {
      used: word('authorizationState', used.result) !== 0n,
      balance: word('balanceOf', balance.result),
      gas: gas.ok ? quantity('eth_estimateGas', gas.result) : null,
      revert: gas.ok ? null : gas.error.message,
    };
  }

  async payerState(t: TransferCall): Promise<{ used: boolean; balance: bigint }> {
    const [used, balance] = await this.rpc.batch([this.readCall(authorizationStateData(t.from, t.nonce)), this.readCall(balanceOfData(t.from))]);
    if (!used.ok) throw used.error;
    if (!balance.ok) throw balance.error;
    return { used: word('authorizationState', used.result) !== 0n, balance: word('balanceOf', balance.result) };
  }

  private fee?: { at: number; value: Promise<{ maxFeePerGas: bigint; maxPriorityFeePerGas: bigint }> };

  /** viem's estimate (max fee = base fee × its multiplier + tip: room for rising base fees), kept FEE_CACHE_MS. */
  fees() {
    if (this.fee && Date.now() - this.fee.at < FEE_CACHE_MS) return this.fee.value;
    const value = this.viem('fees', () => this.client.estimateFeesPerGas()).then((f) => ({
      maxFeePerGas: f.maxFeePerGas,
      maxPriorityFeePerGas: f.maxPriorityFeePerGas,
    }));
    this.fee = { at: Date.now(), value };
    value.catch(() => (this.fee = undefined));
    return value;
  }

  async receipt(hash: Hex): Promise<Receipt | null> {
    const r = await this.rpc.call<{ status?: Hex; blockNumber?: Hex } | null>('eth_getTransactionReceipt', [hash]);
    // not mined yet (a node may answer a pending receipt without a block); a receipt without a status is waited on as before
    if (!r?.blockNumber || (r.status !== '0x1' && r.status !== '0x0')) return null;
    return { status: r.status === '0x1' ? 'success' : 'reverted', blockNumber: BigInt(r.blockNumber) };
  }

  async knows(hash: Hex): Promise<boolean> {
    return (await this.rpc.call<unknown>('eth_getTransactionByHash', [hash])) !== null;
  }

  async usedBy(authorizer: Hex, nonce: Hex): Promise<Hex | null> {
    const latest = await this.viem('eth_blockNumber', () => this.client.getBlockNumber());
    const fromBlock = latest > LOG_LOOKBACK_BLOCKS ? latest - LOG_LOOKBACK_BLOCKS : 0n;
    const logs = await this.viem('eth_getLogs', () =>
      this.client.getLogs({ address: this.token, event: EIP3009_ABI[4], args: { authorizer, nonce }, fromBlock, toBlock: latest }),
    );
    return logs[0]?.transactionHash ?? null;
  }
}
