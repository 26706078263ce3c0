import { createHash, randomBytes } from 'node:crypto';
import type { Operation, Store } from '../store/store.js';
import { committedDespite } from '../store/unknown-outcome.js';
import type { CachedValue, PrefixCache } from '../store/prefix-cache.js';
import { lastSegment, tokenKey, tokenPrefix, tokenUseKey, tokenUsePrefix, tokensIssuedKey } from '../store/keys.js';
import type { Token, TokenRecord, TokenRole } from '../schemas/token.js';

// Every write of a token record: issue, bootstrap, revoke, and the listing people see. A secret is
// `plt_` and 256 random bits in base64url; only its SHA-256 reaches the store.

export interface TokenSpec {
  name: string;
  role: TokenRole;
  services?: string;
  /** Milliseconds from now; none: the token never expires. */
  expiresInMs?: number;
}

export interface IssuedToken {
  record: TokenRecord;
  secret: string;
  /** Store revision of the write. */
  revision: number;
}

export const BOOTSTRAP_TOKEN_NAME = 'bootstrap';

export const newSecret = (): string => `plt_${randomBytes(32).toString('base64url')}`;

export const hashSecret = (secret: string): string => createHash('sha256').update(secret).digest('hex');

function newRecord(spec: TokenSpec, secret: string, now: number): TokenRecord {
  return {
    name: spec.name,
    role: spec.role,
    ...(spec.services === undefined ? {} : { services: spec.services }),
    createdAt: new Date(now).toISOString(),
    ...(spec.expiresInMs === undefined ? {} : { expiresAt: new Date(now + spec.expiresInMs).toISOString() }),
    hash: hashSecret(secret),
  };
}

/**
 * Writes the token when `absentKey` does not exist, and marks that a token was issued, in one
 * transaction. Returns undefined (and writes nothing) otherwise; the token when the write's answer
 * was lost but the store holds it.
 */
async function issueIfAbsent(store: Store, absentKey: string, spec: TokenSpec, now: number): Promise<IssuedToken | undefined> {
  const secret = newSecret();
  const record = newRecord(spec, secret, now);
  const value = JSON.stringify(record);
  try {
    const result = await store.txn(
      [{ key: absentKey, target: 'createRevision', equals: 0 }],
      [
        { op: 'put', key: tokenKey(spec.name), value },
        { op: 'put', key: tokensIssuedKey, value: record.createdAt },
      ],
    );
    return result.succeeded ? { record, secret, revision: result.revision } : undefined;
  } catch (error) {
    // The secret exists only here: when the write committed, losing its answer must not lose the token.
    return { record, secret, revision: (await committedDespite(error, store, tokenKey(spec.name), value)).modRevision };
  }
}

/** The token of this name in a watched copy of the tokens (src/auth/token-cache.ts). */
export const cachedToken = (tokens: PrefixCache, name: string): CachedValue | undefined => tokens.get(tokenKey(name));

/** The write of a token's last use (at most once a minute per token and process, by token-cache.ts). */
export const tokenUseWrite = (name: string, at: Date): Operation => ({ op: 'put', key: tokenUseKey(name), value: at.toISOString() });

/** A new token; undefined when one of that name exists. */
export const issueToken = (store: Store, spec: TokenSpec, now = Date.now()): Promise<IssuedToken | undefined> =>
  issueIfAbsent(store, tokenKey(spec.name), spec, now);

/**
 * The first admin token. Of any number of bootstraps, at most one succeeds, and none once any
 * token was issued (revoking every token does not reopen it, as with `nomad acl bootstrap`).
 */
export const bootstrapToken = (store: Store, now = Date.now()): Promise<IssuedToken | undefined> =>
  issueIfAbsent(store, tokensIssuedKey, { name: BOOTSTRAP_TOKEN_NAME, role: 'admin' }, now);

/** Whether any token was ever issued (bootstrap is closed for good once one was). */
export const tokensWereIssued = async (store: Store): Promise<boolean> => (await store.get(tokensIssuedKey)) !== undefined;

/** Deletes the token and its last-use time; returns false when there was no such token. */
export async function revokeToken(store: Store, name: string): Promise<boolean> {
  const result = await store.txn(
    [{ key: tokenKey(name), target: 'version', equals: 0 }],
    [],
    [
      { op: 'delete', key: tokenKey(name) },
      { op: 'delete', key: tokenUseKey(name) },
    ],
  );
  return !result.succeeded;
}

/** Every token as people see it: the record without its hash, with its last use. */
export async function listTokens(store: Store): Promise<Token[]> {
  const [records, uses] = await Promise.all([store.list(tokenPrefix), store.list(tokenUsePrefix)]);
  const lastUse = new Map(uses.map((kv) => [lastSegment(kv.key), kv.value]));
  return records.map((kv) => {
    const { hash: _hash, ...token } = JSON.parse(kv.value) as TokenRecord;
    const used = lastUse.get(token.name);
    return used ? { ...token, lastUsedAt: used } : token;
  });
}
