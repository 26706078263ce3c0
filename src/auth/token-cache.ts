import { timingSafeEqual } from 'node:crypto';
import type { Store } from '../store/store.js';
import { tokenPrefix } from '../store/keys.js';
import { decodeCached, PrefixCache, type CachedValue } from '../store/prefix-cache.js';
import type { TokenRecord } from '../schemas/token.js';
import { cachedToken, hashSecret, tokenUseWrite } from './tokens.js';
import { bearerToken } from './caller.js';

// The token records every role checks calls against: a watched in-memory copy (no store read per
// request), indexed by the hash of the secret. A revoked token leaves the copy as soon as the
// watch delivers its deletion. While the store is unreachable, lookups throw (503), never guess.

const USE_RECORD_INTERVAL_MS = 60_000;

/** A secret already matched to its token, and the cache entry the token was read from. */
interface KnownSecret {
  record: TokenRecord;
  key: string;
  entry: CachedValue;
}

export class TokenCache {
  private byHash: Map<string, TokenRecord> | undefined;
  /**
   * Secrets already matched to their token, so a caller's every call is not hashed again (the
   * hash and its comparison were most of what a token check cost). Holds only secrets of tokens
   * that exist, so it is no bigger than the token list; emptied whenever a token changes.
   */
  private bySecret = new Map<string, KnownSecret>();
  /**
   * The bearer header each connection (a request's socket) presented last and what it matched: a
   * keep-alive client's next call with the same header is answered by comparing the header, without
   * parsing the secret or hashing it as a map key (most of what the check still cost per call).
   * Weak: an entry goes with its connection.
   */
  private readonly byConnection = new WeakMap<object, { header: string; known: KnownSecret }>();
  private readonly lastRecorded = new Map<string, number>();

  private constructor(
    private readonly store: Store,
    private readonly records: PrefixCache,
  ) {
    records.onChange(() => {
      this.byHash = undefined;
      this.bySecret = new Map();
    });
  }

  static async start(store: Store): Promise<TokenCache> {
    return new TokenCache(store, await PrefixCache.start(store, tokenPrefix));
  }

  /** The token whose secret this is, or undefined. */
  find(secret: string): TokenRecord | undefined {
    return this.known(secret)?.record;
  }

  /**
   * The token an `Authorization` header's bearer secret names, or undefined (no bearer secret, or
   * an unknown one). `connection` remembers the answer for its next call with the same header.
   */
  findBearer(header: string, connection: object | null): TokenRecord | undefined {
    const last = connection === null ? undefined : this.byConnection.get(connection);
    if (last !== undefined && last.header === header && this.isCurrent(last.known)) return last.known.record;
    const secret = bearerToken(header);
    const known = secret === undefined ? undefined : this.known(secret);
    if (known && connection !== null) this.byConnection.set(connection, { header, known });
    return known?.record;
  }

  private known(secret: string): KnownSecret | undefined {
    const known = this.bySecret.get(secret);
    if (known) return this.isCurrent(known) ? known : undefined;
    const hash = hashSecret(secret);
    const record = this.index().get(hash);
    if (!record || !timingSafeEqual(Buffer.from(record.hash, 'hex'), Buffer.from(hash, 'hex'))) return undefined;
    const entry = cachedToken(this.records, record.name);
    if (!entry || decodeCached<TokenRecord>(entry).hash !== record.hash) return undefined;
    const matched = { record, key: entry.key, entry };
    this.bySecret.set(secret, matched);
    return matched;
  }

  /**
   * Whether a matched token is still the version it was matched to: the cache holds the very entry
   * it was read from (an identity check: no key to build, no JSON to look up again). Throws while
   * the store is unreachable: a token revoked meanwhile must not pass.
   */
  private isCurrent(known: KnownSecret): boolean {
    return this.records.get(known.key) === known.entry;
  }

  /** The token of this name, or undefined; throws while the store is unreachable. A session names its token (src/auth/session.ts). */
  named(name: string): TokenRecord | undefined {
    const entry = cachedToken(this.records, name);
    return entry ? decodeCached<TokenRecord>(entry) : undefined;
  }

  /** Calls `listener` whenever a token is issued or revoked; returns what stops it. */
  onChange(listener: () => void): () => void {
    return this.records.onChange(() => listener());
  }

  /** Notes that the token was used: written to the store at most once a minute per token, never blocking the call. */
  recordUse(token: TokenRecord, now = Date.now()): void {
    if (now - (this.lastRecorded.get(token.name) ?? 0) < USE_RECORD_INTERVAL_MS) return;
    this.lastRecorded.set(token.name, now);
    const entry = cachedToken(this.records, token.name);
    if (!entry) return;
    // Only while the token still exists, so a revoked token leaves no last-use key behind.
    void this.store
      .txn([{ key: entry.key, target: 'modRevision', equals: entry.modRevision }], [tokenUseWrite(token.name, new Date(now))])
      .catch(() => undefined);
  }

  close(): Promise<void> {
    return this.records.close();
  }

  private index(): Map<string, TokenRecord> {
    this.byHash ??= new Map(this.records.values().map((entry) => decodeCached<TokenRecord>(entry)).map((record) => [record.hash, record]));
    return this.byHash;
  }
}
