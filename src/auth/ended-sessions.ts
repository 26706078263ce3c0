import type { Store } from '../store/store.js';
import { endedSessionKey, endedSessionPrefix } from '../store/keys.js';
import { PrefixCache } from '../store/prefix-cache.js';
import type { SessionClaims } from './session.js';

// Signing out ends a session everywhere, not only in the browser that signs out: the session's id
// is recorded until the time it would have ended, every role watches the records, and a cookie
// naming an ended session is refused like a revoked token's (src/auth/session.ts). Records of
// sessions that are over anyway are dropped at the next sign-out, so the list stays as short as
// the sign-outs of the last 12 hours.

/** A session id as sealed by sessionClaims: base64url of 16 random bytes. */
const SESSION_ID = /^[A-Za-z0-9_-]{22}$/;

export class EndedSessions {
  private constructor(
    private readonly store: Store,
    private readonly records: PrefixCache,
  ) {}

  static async start(store: Store): Promise<EndedSessions> {
    return new EndedSessions(store, await PrefixCache.start(store, endedSessionPrefix));
  }

  /** Whether the session was signed out; throws while the store is unreachable, never guesses. */
  has(id: string): boolean {
    return SESSION_ID.test(id) && this.records.get(endedSessionKey(id)) !== undefined;
  }

  /** Records the session as ended, and drops the records of sessions whose time is up. */
  async end(claims: SessionClaims, now = Date.now()): Promise<void> {
    if (!SESSION_ID.test(claims.id)) return;
    // At most 100 a time: etcd refuses a transaction of more than 128 operations.
    const over = this.records.values().filter((entry) => Date.parse(entry.value) <= now).slice(0, 100);
    await this.store.txn([], [
      { op: 'put', key: endedSessionKey(claims.id), value: new Date(claims.expiresAt).toISOString() },
      ...over.map((entry) => ({ op: 'delete' as const, key: entry.key })),
    ]);
  }

  /** Calls `listener` whenever a session is signed out; returns what stops it. */
  onChange(listener: () => void): () => void {
    return this.records.onChange(() => listener());
  }

  close(): Promise<void> {
    return this.records.close();
  }
}
