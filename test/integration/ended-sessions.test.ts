import t from 'tap';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { endedSessionPrefix } from '../../src/store/keys.js';

// Signing out records the session as ended until it would have ended (src/auth/ended-sessions.ts),
// in the store every role watches and holds in memory. Any token may sign in and out: on a real
// etcd with an orchestrator under --auth token, one token's sign-outs are bounded, and a session
// that could not be used anyway (signed out already, its token revoked) leaves no record.

const etcd = await startEtcd();
const orchestrator = await serveRole('orchestrator', await freePort(), ['--etcd', etcd.url, '--announce-ttl', '3', '--auth', 'token']);
const store = new EtcdStore([etcd.url]);
t.teardown(async () => {
  await orchestrator.stop();
  await store.close();
  await etcd.stop();
});

const admin = (await http('POST', `${orchestrator.url}/tokens/bootstrap`)).body.secret as string;
const newToken = async (name: string) =>
  (await http('POST', `${orchestrator.url}/tokens`, { name, role: 'read' }, { authorization: `Bearer ${admin}` })).body.secret as string;
const records = async () => (await store.list(endedSessionPrefix)).length;

/** Signs in with `secret`; the session's cookie and proof, as the dashboard's page sends them. */
async function signIn(secret: string): Promise<Record<string, string>> {
  const reply = await http('POST', `${orchestrator.url}/session`, { token: secret });
  if (reply.status !== 200) throw new Error(`signing in: ${JSON.stringify(reply.body)}`);
  return { cookie: reply.headers.get('set-cookie')!.split(';')[0]!, 'x-platform-session-proof': reply.body.proof as string, origin: orchestrator.url };
}
const signOut = (session: Record<string, string>) => http('DELETE', `${orchestrator.url}/session`, undefined, session);

t.test('one token keeps at most 50 ended sessions: its next sign-out is refused 429 naming the cap, and adds nothing', async (t) => {
  const secret = await newToken('churner');
  const statuses: number[] = [];
  for (let i = 0; i < 50; i += 1) statuses.push((await signOut(await signIn(secret))).status);
  t.same(new Set(statuses), new Set([204]), 'fifty sign-outs end their sessions');
  t.equal(await records(), 50);
  const refused = await signOut(await signIn(secret));
  t.equal(refused.status, 429);
  t.equal(
    refused.body.message,
    'token churner has 50 signed-out sessions that have not expired yet, the most one token may have: revoke or reissue the token to end all its sessions',
  );
  t.equal(await records(), 50, 'no record was added');
  const other = await signOut(await signIn(await newToken('bystander')));
  t.equal(other.status, 204, "another token's sign-out is not held to the first one's share");
  t.equal(await records(), 51);
});

t.test('a session that could not be used anyway leaves no record: signed out twice, or its token revoked', async (t) => {
  const before = await records();
  const session = await signIn(await newToken('twice'));
  t.equal((await signOut(session)).status, 204);
  t.equal((await signOut(session)).status, 204, 'signing out again is no error');
  t.equal(await records(), before + 1, 'one record for one session');
  const revoked = await signIn(await newToken('revoked'));
  t.equal((await http('DELETE', `${orchestrator.url}/tokens/revoked`, undefined, { authorization: `Bearer ${admin}` })).status, 204);
  t.equal((await signOut(revoked)).status, 204);
  t.equal(await records(), before + 1, 'a revoked token’s session needs no record');
});
