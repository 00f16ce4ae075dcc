// One trust anchor per cluster (issue 36 item 5): in cluster mode a host with the embedded default
// TLS takes the cluster's edge CA from the registry (offering its own local CA when the cluster has
// none yet: the first host's clients keep trusting what they trusted) and presents a wildcard
// certificate that chains to it, so a client given any host's tls/ca.pem reaches every host. The
// first attempt is awaited at start only when the registry answered this host's start, and for a
// second at most (the edge listens without waiting on a slow registry); until one succeeds, the
// host presents what it has (its own CA, or the cluster's from an earlier run) and asks again every
// `retryMs`. A host with the operator's certificate or ACME is left as it is (startTls).

import { isAppError } from '../errors.js';
import type { Logger } from '../log/index.js';
import type { CaFiles, TlsManager } from './tls.js';

/** The registry's edge CA (registry's RegistryEdgeCa), as the edge sees it. */
export interface EdgeCaSource {
  /** The cluster's edge CA; `offer()`'s, stored now, when the cluster has none. */
  ensure(offer: () => CaFiles): Promise<Pick<CaFiles, 'certPem' | 'keyPem'>>;
}

/** Longest the start waits for the first attempt. */
const FIRST_WAIT_MS = 1000;

/** Takes the cluster's edge CA into `tls` now or as soon as the registry gives it. */
export async function followClusterCa(tls: TlsManager, source: EdgeCaSource, o: { up: boolean; retryMs: number; log: Logger }): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let warned = false;
  tls.onClose(() => {
    stopped = true;
    clearTimeout(timer);
  });
  const attempt = async (): Promise<void> => {
    try {
      const ca = await source.ensure(() => tls.localCa()!);
      if (!stopped && tls.adoptCa(ca))
        o.log.info("HTTPS certificate issued under the cluster's CA: a client that trusts it reaches every host", { ca: tls.caFile });
    } catch (err) {
      if (stopped) return;
      if (!warned)
        o.log.warn("the cluster's CA for HTTPS is not taken yet: this host presents its own certificate until the registry gives it", {
          code: isAppError(err) ? err.code : undefined,
          detail: (err as Error).message,
        });
      warned = true;
      timer = setTimeout(() => void attempt(), o.retryMs).unref();
    }
  };
  if (!o.up) {
    timer = setTimeout(() => void attempt(), 0).unref();
    return;
  }
  let waited: NodeJS.Timeout | undefined;
  await Promise.race([attempt(), new Promise<void>((resolve) => (waited = setTimeout(resolve, FIRST_WAIT_MS).unref()))]);
  clearTimeout(waited);
}
