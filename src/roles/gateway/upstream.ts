import { Pool } from 'undici';
import type { Candidate } from './upstream-choice.js';

// One address requests go to (a unit, or an announced component), with its own keep-alive pool.
// Upstreams are kept per address across route-table rebuilds, so in-flight counts and pooled
// connections survive unrelated changes. One that leaves the table is retired: no new requests
// reach it, and its pool closes once the requests in flight on it have finished (draining).

export interface UpstreamOptions {
  /** Most connections to one upstream. */
  connections: number;
  /** How long an upstream may take to connect. */
  connectTimeoutMs: number;
}

export class Upstream implements Candidate {
  inFlight = 0;
  avoidUntil = 0;
  readonly host: string;
  readonly port: number;
  readonly pool: Pool;

  constructor(
    readonly address: string,
    /** The unit answering at the address (updated if another unit takes the address over). */
    public unit: string,
    options: UpstreamOptions,
  ) {
    const colon = address.lastIndexOf(':');
    this.host = address.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
    this.port = Number(address.slice(colon + 1));
    this.pool = new Pool(`http://${address}`, {
      connections: options.connections,
      pipelining: 1,
      connectTimeout: options.connectTimeoutMs,
      // The gateway's own limits apply per request (headersTimeout, bodyTimeout in the dispatch).
      keepAliveTimeout: 4_000,
      keepAliveMaxTimeout: 60_000,
    });
  }

  /** Stops taking requests; resolves once those in flight have finished. */
  retire(): Promise<void> {
    return this.pool.close().catch(() => undefined);
  }
}

/** Upstreams by address: one pool per address, reused while the address stays routed. */
export class Upstreams {
  private readonly byAddress = new Map<string, Upstream>();

  constructor(private readonly options: UpstreamOptions) {}

  /** The upstream for `address`, created on first use. */
  acquire(address: string, unit: string): Upstream {
    let upstream = this.byAddress.get(address);
    if (upstream === undefined) {
      upstream = new Upstream(address, unit, this.options);
      this.byAddress.set(address, upstream);
    }
    upstream.unit = unit;
    return upstream;
  }

  /** Retires every upstream whose address is not in `keep`; their in-flight requests finish. */
  retireExcept(keep: ReadonlySet<string>): void {
    for (const [address, upstream] of this.byAddress) {
      if (keep.has(address)) continue;
      this.byAddress.delete(address);
      void upstream.retire();
    }
  }

  /** Retires them all and waits until their pools have closed, at most `timeoutMs`, then destroys the rest. */
  async close(timeoutMs: number): Promise<void> {
    const upstreams = [...this.byAddress.values()];
    this.byAddress.clear();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    await Promise.race([Promise.all(upstreams.map((upstream) => upstream.retire())), timeout]);
    clearTimeout(timer);
    await Promise.all(upstreams.map((upstream) => upstream.pool.destroy().catch(() => undefined)));
  }
}
