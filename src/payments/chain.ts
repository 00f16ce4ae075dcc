// The chain port of self-settlement and its viem implementation over one JSON-RPC URL: reads of
// the EIP-3009 token (EIP-712 domain separator, balance, authorizationState, AuthorizationUsed
// logs), an eth_call simulation of transferWithAuthorization, the gas wallet's balance and next
// nonce, fees, and broadcasting a signed raw transaction. The token reads and the simulation made
// in one tick share a JSON-RPC batch.
// RpcUnreachable marks answers that never came (transport), as opposed to reverts.

import {
  createPublicClient,
  encodeFunctionData,
  http,
  HttpRequestError,
  parseAbi,
  TimeoutError,
  BaseError,
  TransactionNotFoundError,
  type Hex,
  type PublicClient,
} from 'viem';
import { leanFetch } from '../net/index.js';

export const EIP3009_ABI = parseAbi([
  'function balanceOf(address) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
]);

/** An answer that never came: the RPC is down, slow, or cut the connection. */
export class RpcUnreachable extends Error {
  constructor(what: string, cause: unknown) {
    super(`rpc ${what}: ${cause instanceof BaseError ? cause.shortMessage : (cause as Error).message}`.slice(0, 300));
    this.name = 'RpcUnreachable';
  }
}

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

/** What self-settlement needs from the chain. */
export interface Chain {
  chainId(): Promise<number>;
  domainSeparator(): Promise<Hex>;
  balanceOf(owner: Hex): Promise<bigint>;
  authorizationUsed(authorizer: Hex, nonce: Hex): Promise<boolean>;
  /** null when the call would succeed from `sender`; else the revert's short message. */
  simulate(sender: Hex, t: TransferCall): Promise<string | null>;
  nativeBalance(owner: Hex): Promise<bigint>;
  pendingNonce(owner: Hex): Promise<number>;
  fees(): Promise<{ maxFeePerGas: bigint; maxPriorityFeePerGas: bigint }>;
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

export function transferData(t: TransferCall): Hex {
  const sig = t.signature.slice(2);
  const r = `0x${sig.slice(0, 64)}` as Hex;
  const s = `0x${sig.slice(64, 128)}` as Hex;
  let v = parseInt(sig.slice(128, 130), 16);
  if (v < 27) v += 27;
  return encodeFunctionData({
    abi: EIP3009_ABI,
    functionName: 'transferWithAuthorization',
    args: [t.from, t.to, t.value, t.validAfter, t.validBefore, t.nonce, v, r, s],
  });
}

const transport = (e: unknown) => e instanceof BaseError && e.walk((x) => x instanceof HttpRequestError || x instanceof TimeoutError) !== null;

export class ViemChain implements Chain {
  private readonly client: PublicClient;
  private readonly batched: PublicClient;

  constructor(
    rpcUrl: string,
    private readonly token: Hex,
    timeoutMs: number,
  ) {
    this.client = createPublicClient({ transport: http(rpcUrl, { timeout: timeoutMs, retryCount: 0, fetchFn: leanFetch }) }) as PublicClient;
    // the checks before the work are made together: one JSON-RPC batch (a batch costs a timer tick, so single calls go alone)
    this.batched = createPublicClient({
      transport: http(rpcUrl, { timeout: timeoutMs, retryCount: 0, batch: { wait: 0 }, fetchFn: leanFetch }),
    }) as PublicClient;
  }

  private async rpc<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      if (transport(e) || !(e instanceof BaseError)) throw new RpcUnreachable(what, e);
      throw e;
    }
  }

  private read<T>(functionName: 'balanceOf' | 'authorizationState' | 'DOMAIN_SEPARATOR', args: readonly unknown[]): Promise<T> {
    return this.rpc(functionName, () => this.batched.readContract({ address: this.token, abi: EIP3009_ABI, functionName, args } as never) as Promise<T>);
  }

  chainId = () => this.rpc('eth_chainId', () => this.client.getChainId());
  domainSeparator = () => this.read<Hex>('DOMAIN_SEPARATOR', []);
  balanceOf = (owner: Hex) => this.read<bigint>('balanceOf', [owner]);
  authorizationUsed = (authorizer: Hex, nonce: Hex) => this.read<boolean>('authorizationState', [authorizer, nonce]);
  nativeBalance = (owner: Hex) => this.rpc('eth_getBalance', () => this.client.getBalance({ address: owner }));
  pendingNonce = (owner: Hex) => this.rpc('eth_getTransactionCount', () => this.client.getTransactionCount({ address: owner, blockTag: 'pending' }));
  sendRaw = (raw: Hex) => this.rpc('eth_sendRawTransaction', () => this.client.sendRawTransaction({ serializedTransaction: raw }));

  private fee?: { at: number; value: Promise<{ maxFeePerGas: bigint; maxPriorityFeePerGas: bigint }> };

  /** viem's estimate (max fee = 2 × base fee + tip: room for several blocks of rising base fee), kept FEE_CACHE_MS. */
  fees() {
    if (this.fee && Date.now() - this.fee.at < FEE_CACHE_MS) return this.fee.value;
    const value = this.rpc('fees', () => this.client.estimateFeesPerGas()).then((f) => ({
      maxFeePerGas: f.maxFeePerGas,
      maxPriorityFeePerGas: f.maxPriorityFeePerGas,
    }));
    this.fee = { at: Date.now(), value };
    value.catch(() => (this.fee = undefined));
    return value;
  }

  async simulate(sender: Hex, t: TransferCall): Promise<string | null> {
    try {
      await this.rpc('eth_call', () => this.batched.call({ account: sender, to: this.token, data: transferData(t) }));
      return null;
    } catch (e) {
      if (e instanceof RpcUnreachable) throw e;
      return (e as BaseError).shortMessage ?? 'reverted';
    }
  }

  estimateGas = (sender: Hex, t: TransferCall) =>
    this.rpc('eth_estimateGas', () => this.client.estimateGas({ account: sender, to: this.token, data: transferData(t) }));

  /** The raw request: viem's getTransactionReceipt throws an error object (stack, message) for every
   *  poll that finds no receipt yet, the common case while waiting for a block. */
  async receipt(hash: Hex): Promise<Receipt | null> {
    const r = (await this.rpc('eth_getTransactionReceipt', () => this.client.request({ method: 'eth_getTransactionReceipt', params: [hash] }))) as {
      status?: Hex;
      blockNumber?: Hex;
    } | null;
    // not mined yet (a node may answer a pending receipt without a block); a receipt without a status is waited on as before
    if (!r?.blockNumber || (r.status !== '0x1' && r.status !== '0x0')) return null;
    return { status: r.status === '0x1' ? 'success' : 'reverted', blockNumber: BigInt(r.blockNumber) };
  }

  async knows(hash: Hex): Promise<boolean> {
    try {
      await this.rpc('eth_getTransactionByHash', () => this.client.getTransaction({ hash }));
      return true;
    } catch (e) {
      if (e instanceof TransactionNotFoundError) return false;
      throw e;
    }
  }

  async usedBy(authorizer: Hex, nonce: Hex): Promise<Hex | null> {
    const latest = await this.rpc('eth_blockNumber', () => this.client.getBlockNumber());
    const fromBlock = latest > LOG_LOOKBACK_BLOCKS ? latest - LOG_LOOKBACK_BLOCKS : 0n;
    const logs = await this.rpc('eth_getLogs', () =>
      this.client.getLogs({ address: this.token, event: EIP3009_ABI[4], args: { authorizer, nonce }, fromBlock, toBlock: latest }),
    );
    return logs[0]?.transactionHash ?? null;
  }
}
