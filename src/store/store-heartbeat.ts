import type { Store } from './store.js';

// Whether the store answers, asked once a second per store and process, however many watched
// copies of prefixes (src/store/prefix-cache.ts) a process keeps: each used to ping on its own,
// a dozen linearizable reads a second from a process running every role, for one answer.

const PING_INTERVAL_MS = 1000;

/** Told after every ping: undefined when the store answered, else why it did not. */
export type PingListener = (failure: unknown) => void;

const heartbeats = new WeakMap<Store, Set<PingListener>>();

/** Calls `listener` after each ping of `store` while subscribed; the pings run while anyone listens. */
export function onStorePing(store: Store, listener: PingListener): () => void {
  let listeners = heartbeats.get(store);
  if (!listeners) {
    const subscribed = new Set<PingListener>();
    listeners = subscribed;
    heartbeats.set(store, subscribed);
    let pinging = false;
    const timer = setInterval(() => {
      if (subscribed.size === 0) {
        clearInterval(timer);
        heartbeats.delete(store);
        return;
      }
      // A store that is down answers a ping only at its deadline: one ping at a time.
      if (pinging) return;
      pinging = true;
      const tell = (failure: unknown) => {
        pinging = false;
        for (const heard of [...subscribed]) heard(failure);
      };
      store.ping().then(() => tell(undefined), tell);
    }, PING_INTERVAL_MS);
    timer.unref();
  }
  listeners.add(listener);
  const stillListening = listeners;
  return () => void stillListening.delete(listener);
}
