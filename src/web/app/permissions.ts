import type { SessionInfo } from './model.js';

// What the page's caller may change, from GET /session, so a button that could only be refused is
// shown off, with why. The API decides every call by itself (src/auth/access.ts); this is the same
// rule read from the other side, for people.

export type Need = 'deploy' | 'admin';

/** Why the caller may not do what needs `need` (on `service`), or undefined when it may. */
export function refusal(session: SessionInfo, need: Need, service?: string): string | undefined {
  const token = session.token;
  if (!token || token.role === 'admin') return undefined;
  if (token.role === 'read') return 'your token can only read';
  if (need === 'admin') return 'your token can deploy but not do this, which needs an admin token';
  if (token.services !== undefined && service !== undefined && !globMatches(token.services, service)) {
    return `your token may deploy only services matching ${token.services}`;
  }
  return undefined;
}

/** What the page says at the top when its token cannot do everything; undefined when it can. */
export function sessionNote(session: SessionInfo): string | undefined {
  const token = session.token;
  if (token?.role === 'read') return `Signed in as ${token.name}, whose token can only read: Deploy, Roll back, Delete and New service are off.`;
  if (token?.role === 'deploy') return `Signed in as ${token.name}, whose token can deploy ${token.services ? `services matching ${token.services}` : 'every service'} but not declare or delete services.`;
  return undefined;
}

/** A service glob (lowercase letters, digits, "-" and "*") against a name. */
const globMatches = (glob: string, name: string): boolean => new RegExp(`^${glob.split('*').join('.*')}$`).test(name);

/** Turns a button off with the reason as its tooltip, or back on. */
export function allowWhen(button: HTMLButtonElement, why: string | undefined): void {
  button.disabled = why !== undefined;
  if (why === undefined) button.removeAttribute('title');
  else button.title = why;
}
