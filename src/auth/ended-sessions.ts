import type { Store } from '../store/store.js';
import { endedSessionKey, endedSessionPrefix } from '../store/keys.js';
import { PrefixCache, type CachedValue } from '../store/prefix-cache.js';
import { HttpError } from '../http/errors.js';
import type { SessionClaims } from './session.js';
import type { EndedSessionRecord } from '../schemas/session.js';

// Signing out ends a session everywhere, not only in the browser that signs out: the session's id
// is recorded until the time it would have ended, every role watches the records, and a cookie
// naming an ended session is refused like a revoked token's (src/auth/session.ts). Any token may
// sign in and out, and every role holds the records in memory, so they are bounded: a record is
// made only for a session that could still be used (the route checks it first) and lasts only
// until that session's own end (records over are dropped at the next sign-out), one token may
// hold at most `perToken` of them and all tokens together `total`; past either, signing out is
// refused with 429 rather than dropping a record a copy of the cookie would then get past.

/** A session id as sealed by sessionClaims: base64url of 16 random bytes. */
const SESSION_ID = /^[A-Za-z0-9_-]{22}$/;

export interface EndedSessionLimits {
  /** Ended sessions one token may have that have not expired yet. */
  perToken: number;
  /** Ended sessions of every token together. */
  total: number;
}

export const defaultEndedSessionLimits: EndedSessionLimits = { perToken: 50, total: 10_000 };

/** A record's value: the session's token and when it would have ended. Records made before tokens were named hold only the time. */
interface EndedSession {
  token?: string;
  endsAt: number;
}

function readRecord(entry: CachedValue): EndedSession {
  if (!entry.value.startsWith('{')) return { endsAt: Date.parse(entry.value) };
  const { token, endsAt } = JSON.parse(entry.value) as EndedSessionRecord;
  return { ...(token === undefined ? {} : { token }), endsAt: Date.parse(endsAt) };
}

export class EndedSessions {
  private constructor(
    private readonly store: Store,
    private readonly records: PrefixCache,
    private readonly limits: EndedSessionLimits,
  ) {}

  static async start(store: Store, limits = defaultEndedSessionLimits): Promise<EndedSessions> {
    return new EndedSessions(store, await PrefixCache.start(store, endedSessionPrefix), limits);
  }

  /** Whether the session was signed out; throws while the store is unreachable, never guesses. */
  has(id: string): boolean {
    return SESSION_ID.test(id) && this.records.get(endedSessionKey(id)) !== undefined;
  }

  /**
   * Records the session as ended, and drops the records of sessions whose time is up; 429 when its
   * token, or every token together, has as many ended sessions as the limits allow.
   */
  async end(claims: SessionClaims, now = Date.now()): Promise<void> {
    if (!SESSION_ID.test(claims.id) || claims.expiresAt <= now || this.has(claims.id)) return;
    const entries = this.records.values().map((entry) => ({ key: entry.key, record: readRecord(entry) }));
    const over = entries.filter(({ record }) => !(record.endsAt > now));
    const live = entries.length - over.length;
    if (live >= this.limits.total) {
      throw new HttpError(429, `${live} signed-out sessions have not expired yet, the most the platform keeps: try again when some have (within 12 h)`);
    }
    const ofToken = entries.filter(({ record }) => record.token === claims.token && record.endsAt > now).length;
    if (ofToken >= this.limits.perToken) {
      throw new HttpError(
        429,
        `token ${claims.token} has ${ofToken} signed-out sessions that have not expired yet, the most one token may have: ` +
          'revoke or reissue the token to end all its sessions',
      );
    }
    const record = JSON.stringify({ token: claims.token, endsAt: new Date(claims.expiresAt).toISOString() } satisfies EndedSessionRecord);
    // At most 100 deletions a time: etcd refuses a transaction of more than 128 operations.
    const drops = over.slice(0, 100).map(({ key }) => ({ op: 'delete' as const, key }));
    await this.store.txn([], [{ op: 'put', key: endedSessionKey(claims.id), value: record }, ...drops]);
  }

  /** Calls `listener` whenever a session is signed out; returns what stops it. */
  onChange(listener: () => void): () => void {
    return this.records.onChange(() => listener());
  }

  close(): Promise<void> {
    return this.records.close();
  }
}
