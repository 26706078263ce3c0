// Reconcile runs one at a time; triggers that arrive during a run collapse into one follow-up
// run, which starts after the current one and sees everything that happened meanwhile.

export class CoalescingRunner {
  private running: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly run: () => Promise<void>,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** Resolves when a run that started after this call has finished. */
  trigger(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.queued) return this.queued;
    if (!this.running) return (this.running = this.execute());
    this.queued = this.running.then(() => {
      this.queued = undefined;
      return (this.running = this.execute());
    });
    return this.queued;
  }

  /** Stops accepting triggers and waits for the run in progress (and a queued one) to end. */
  async close(): Promise<void> {
    this.closed = true;
    await (this.queued ?? this.running);
  }

  private async execute(): Promise<void> {
    try {
      if (!this.closed) await this.run();
    } catch (error) {
      this.onError(error);
    } finally {
      if (!this.queued) this.running = undefined;
    }
  }
}
