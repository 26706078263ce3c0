import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Store } from '../../store/store.js';
import { acmeChallengeKey, acmeChallengePrefix } from '../../store/keys.js';
import { PrefixCache } from '../../store/prefix-cache.js';

// HTTP-01 answers (RFC 8555 §8.3) on the gateway's plain listener: the key authorization of a
// token is in the store (written by whichever gateway orders), so every gateway answers for every
// order, as the ACME server may ask any of them.

export const CHALLENGE_PATH = '/.well-known/acme-challenge/';

/** A token is base64url (RFC 8555 §8.1); anything else is not looked up. */
const TOKEN = /^[A-Za-z0-9_-]{1,256}$/;

/** Writes a token's key authorization, leased with the order's lock: a challenge outlives neither the order nor the gateway. */
export const putChallenge = (store: Store, token: string, keyAuthorization: string, leaseId: string): Promise<number> =>
  store.put(acmeChallengeKey(token), keyAuthorization, { lease: leaseId });

export const removeChallenge = (store: Store, token: string): Promise<boolean> => store.delete(acmeChallengeKey(token));

export class ChallengeAnswers {
  private constructor(private readonly cache: PrefixCache) {}

  static async start(store: Store): Promise<ChallengeAnswers> {
    return new ChallengeAnswers(await PrefixCache.start(store, acmeChallengePrefix));
  }

  /** Answers the request when it asks for a challenge; false when it does not. */
  answer(req: IncomingMessage, res: ServerResponse): boolean {
    const url = req.url ?? '/';
    if (!url.startsWith(CHALLENGE_PATH)) return false;
    const token = url.slice(CHALLENGE_PATH.length).split('?')[0]!;
    let keyAuthorization: string | undefined;
    try {
      keyAuthorization = TOKEN.test(token) ? this.cache.get(acmeChallengeKey(token))?.value : undefined;
    } catch {
      keyAuthorization = undefined; // the store does not answer: the ACME server will try again
    }
    const body = keyAuthorization ?? 'no such ACME challenge token\n';
    res.writeHead(keyAuthorization === undefined ? 404 : 200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store' });
    res.end(req.method === 'HEAD' ? undefined : body);
    return true;
  }

  /** Resolves once this gateway answers with what the store holds at `revision`. */
  caughtUp(revision: number): Promise<void> {
    return this.cache.caughtUp(revision);
  }

  close(): Promise<void> {
    return this.cache.close();
  }
}
