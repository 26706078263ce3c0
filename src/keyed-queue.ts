// Work that must not overlap per key (a service's rollouts, a unit slot's status writes) runs one
// task after another, in the order it was queued; different keys run side by side.

/** Runs tasks one at a time per key, in the order they were queued. */
export class KeyedQueue {
  private readonly tails = new Map<string, Promise<unknown>>();
  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const next = (this.tails.get(key) ?? Promise.resolve()).catch(() => undefined).then(task);
    this.tails.set(key, next);
    void next
      .catch(() => undefined)
      .finally(() => {
        if (this.tails.get(key) === next) this.tails.delete(key);
      });
    return next;
  }
  idle(): Promise<unknown> {
    return Promise.allSettled([...this.tails.values()]);
  }
  /** Work for `key` is queued or running. */
  busy(key: string): boolean {
    return this.tails.has(key);
  }
}
