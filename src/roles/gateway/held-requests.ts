import type { ServerResponse } from 'node:http';

// The requests one route holds while its service is handed over (docs/deploys.md, "Handover"):
// in memory, at most `limit` at once. Each waits until the hold is lifted and the route has a
// unit (release), or until the hold's end, when it is routed as any request is then (503 if the
// service still has no unit). A client that gives up is forgotten at once.

/** Requests one route holds at most; those beyond are answered 503 at once. */
export const HELD_REQUESTS_LIMIT = 1000;

interface Held {
  /** Routes the request as it would be routed now. */
  send: () => void;
  timer: NodeJS.Timeout;
  forget: () => void;
}

export class HeldRequests {
  private readonly waiting = new Set<Held>();

  constructor(
    private readonly limit = HELD_REQUESTS_LIMIT,
    /** Called with how long each request was held (seconds) when it goes on. */
    private readonly heldFor: (seconds: number) => void = () => undefined,
  ) {}

  get size(): number {
    return this.waiting.size;
  }

  /** Holds the request until `release` or `until` (epoch ms); false when the route holds its limit already. */
  hold(res: ServerResponse, until: number, send: () => void): boolean {
    if (this.waiting.size >= this.limit) return false;
    const start = performance.now();
    const held: Held = {
      send: () => {
        this.drop(held);
        this.heldFor((performance.now() - start) / 1000);
        send();
      },
      timer: setTimeout(() => held.send(), Math.max(0, until - Date.now())),
      forget: () => this.drop(held),
    };
    res.once('close', held.forget);
    this.waiting.add(held);
    return true;
  }

  /** Sends every held request on, in the order they came. */
  release(): void {
    for (const held of [...this.waiting]) held.send();
  }

  private drop(held: Held): void {
    clearTimeout(held.timer);
    this.waiting.delete(held);
  }
}
