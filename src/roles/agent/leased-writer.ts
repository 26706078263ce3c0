// What the agent needs of LeasedKeys (src/store/leased-keys.ts): keys that live as long as the
// agent's lease, so a dead machine's registration and unit statuses vanish on their own.
export interface LeasedWriter {
  set(key: string, value: string): Promise<unknown>;
  remove(key: string): Promise<unknown>;
  /** Stops writing `key` again after a lost lease, without touching the store. */
  forget(key: string): void;
}
