// A bounded history: the newest `capacity` items, oldest first. Pushing past the capacity
// overwrites the oldest, so memory stays fixed whatever the uptime.

export class SampleRing<T> {
  private readonly items: (T | undefined)[];
  private next = 0;
  private size = 0;

  constructor(readonly capacity: number) {
    this.items = new Array<T | undefined>(capacity);
  }

  push(item: T): void {
    this.items[this.next] = item;
    this.next = (this.next + 1) % this.capacity;
    this.size = Math.min(this.size + 1, this.capacity);
  }

  get length(): number {
    return this.size;
  }

  newest(): T | undefined {
    return this.size === 0 ? undefined : this.items[(this.next - 1 + this.capacity) % this.capacity];
  }

  /** Oldest first. */
  toArray(): T[] {
    const start = (this.next - this.size + this.capacity) % this.capacity;
    return Array.from({ length: this.size }, (_, i) => this.items[(start + i) % this.capacity]!);
  }
}

/** Intervals in the graphs' window. */
export const ringCapacity = (historySeconds: number, intervalSeconds: number): number => Math.ceil(historySeconds / intervalSeconds);

/** The start of the interval `now` falls in: intervals are aligned to the clock, so every role's line up. */
export const intervalStart = (now: number, intervalSeconds: number): number => now - (now % (intervalSeconds * 1000));
