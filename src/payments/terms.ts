// Payment terms: the `accepts` entry for an amount on our network, the PaymentRequired object,
// and the 402 error that carries it (PAYMENT-REQUIRED header in the dual-alphabet encoding,
// Cache-Control: no-store, and the same terms in the body for clients that read bodies).

import { AppError, type CodeOf } from '../errors.js';
import { encodeHeader } from './codec.js';
import type { NetworkPreset } from './networks.js';
import type { PaymentRequired, PaymentRequirements, ResourceInfo } from './types.js';

export interface TermsConfig {
  net: NetworkPreset;
  payTo: string;
  maxTimeoutSeconds: number;
}

export function requirementsFor(cfg: TermsConfig, amount: bigint): PaymentRequirements {
  return {
    scheme: 'exact',
    network: cfg.net.network,
    amount: amount.toString(),
    asset: cfg.net.asset,
    payTo: cfg.payTo,
    maxTimeoutSeconds: cfg.maxTimeoutSeconds,
    extra: { name: cfg.net.eip712.name, version: cfg.net.eip712.version },
  };
}

export function paymentRequired(cfg: TermsConfig, amount: bigint, resource: ResourceInfo, error: string): PaymentRequired {
  return { x402Version: 2, error, resource, accepts: [requirementsFor(cfg, amount)] };
}

/** A 402 AppError with the terms in the header and the body. */
export function challenge(
  cfg: TermsConfig,
  amount: bigint,
  resource: ResourceInfo,
  code: CodeOf<'payment_required'>,
  detail: string,
  headers: Record<string, string> = {},
): AppError {
  const terms = paymentRequired(cfg, amount, resource, detail);
  return AppError.of(code, detail, {
    headers: { 'payment-required': encodeHeader(terms), 'cache-control': 'no-store', ...headers },
    extra: { x402Version: 2, resource: terms.resource, accepts: terms.accepts },
  });
}
