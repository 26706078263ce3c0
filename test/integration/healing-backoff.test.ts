import t from 'tap';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import type { NotificationEvent } from '../../src/schemas/notification.js';
import type { Deployment } from '../../src/schemas/release.js';

// A dead engine is not a storm (issue 28): the only machine's dockerd stops for a few minutes.
// Healing cannot place the service's unit anywhere; it must back off instead of failing a
// reschedule at every 10 s check, record the failed attempts as one episode, notify once, and
// keep every deployment a user made in the history, with retention as tight as those deployments.

const etcd = await startEtcd();
const registry = await startRegistry();
const engine = await startDockerd();
const repository = `backoff/web-${randomBytes(3).toString('hex')}`;
const [one, two] = await Promise.all([buildTestImage(engine.docker, registry.host, repository, 'one', { label: 'one' }), buildTestImage(engine.docker, registry.host, repository, 'two', { label: 'two' })]);
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const allowReceiver = ['--allowed-notification-destination', '127.0.0.1'];
/** The user's deployments below: retention keeps exactly that many besides healing's records. */
const USER_DEPLOYMENTS = 3;
const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', 'only', '--stop-grace', '1', '--drain-seconds', '0'], { DOCKER_HOST: engine.dockerHost });
const directory = await serveRole('directory', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), [...flags, ...allowReceiver]);
const schedulerFlags = [...flags, ...allowReceiver, '--engine-grace', '3', '--keep-deployments', String(USER_DEPLOYMENTS), '--notify-retry', '1s'];
// Two schedulers: the leader is killed during the outage, and the new one must not storm again.
const schedulers = [await serveRole('scheduler', await freePort(), schedulerFlags), await serveRole('scheduler', await freePort(), schedulerFlags)];

// A local receiver of notifications: every event it is sent, in order.
const received: NotificationEvent[] = [];
const receiverPort = await freePort();
const receiver = createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    received.push(JSON.parse(Buffer.concat(chunks).toString()) as NotificationEvent);
    response.writeHead(200).end();
  });
});
await new Promise<void>((resolve) => receiver.listen(receiverPort, '127.0.0.1', resolve));

t.teardown(async () => {
  await Promise.all([...schedulers, agent, directory, orchestrator].map((role) => role.stop()));
  await new Promise((resolve) => receiver.close(resolve));
  await Promise.all([registry.stop(), etcd.stop()]);
  await engine.stop();
});

const orch = (path: string) => `${orchestrator.url}${path}`;
const SERVICE = 'steady';

async function finished(reply: { status: number; body: any }): Promise<Deployment> {
  if (reply.status !== 200) throw new Error(`deploy answered ${reply.status}: ${JSON.stringify(reply.body)}`);
  const id = reply.body.deployment as string;
  return waitFor(async () => {
    const deployment = (await http('GET', orch(`/deployments/${id}`))).body as Deployment;
    return ['succeeded', 'failed', 'reverted', 'superseded'].includes(deployment.state) ? deployment : undefined;
  }, 90_000, { what: `deployment ${id} to end` });
}

const history = async (): Promise<Deployment[]> => (await http('GET', orch(`/deployments?service=${SERVICE}`))).body as Deployment[];
const reschedulesIn = (deployments: Deployment[]) => deployments.filter((d) => d.trigger === 'reschedule');
const journalKinds = async (kind: string) =>
  ((await http('GET', orch(`/journal?service=${SERVICE}&limit=500`))).body as { kind: string; message: string }[]).filter((entry) => entry.kind === kind);
const failureEvents = () => received.filter((event) => event.event === 'deployment.failed' && event.details.trigger === 'reschedule');
const unitRunning = async () => {
  const units = (await http('GET', orch(`/services/${SERVICE}/units`))).body as { active?: string }[];
  return Array.isArray(units) && units.length === 1 && units[0]!.active === 'active';
};

t.test('the only machine loses its engine for minutes: healing backs off, one episode, one notification, the user history kept', async (t) => {
  const endpoint = await http('POST', orch('/notifications/endpoints'), { url: `http://127.0.0.1:${receiverPort}/hook`, services: SERVICE });
  t.equal(endpoint.status, 201, `the endpoint added${endpoint.status === 201 ? '' : `: ${JSON.stringify(endpoint.body)}`}`);
  const declared = await http('POST', orch('/services'), { name: SERVICE, description: 'backoff', containerRepository: `${registry.host}/${repository}`, loadBalanced: false, publicFacing: false, numInstances: 1 });
  t.equal(declared.status, 201, `${SERVICE} declared${declared.status === 201 ? '' : `: ${JSON.stringify(declared.body)}`}`);
  const users = [
    await finished(await http('POST', orch(`/services/${SERVICE}/deploy`), { containerRepository: one.reference })),
    await finished(await http('POST', orch(`/services/${SERVICE}/deploy`), { containerRepository: two.reference })),
    await finished(await http('POST', orch(`/services/${SERVICE}/rollback`), { version: 1 })),
  ];
  t.same(users.map((d) => d.state), ['succeeded', 'succeeded', 'succeeded'], 'the user deployments succeeded');
  t.equal(users.length, USER_DEPLOYMENTS);
  await waitFor(unitRunning, 60_000, { what: 'the unit running' });

  await engine.pause();
  // The grace period ends 3 s after the agent reports the engine gone (within its 5 s resync).
  const first = await waitFor(async () => reschedulesIn(await history()).find((d) => d.state === 'failed'), 60_000, { what: 'a failed reschedule' });
  t.match(first.reason, /Docker engine unreachable/, 'it failed for want of an engine');
  const failedAt = Date.parse(first.finishedAt!);

  // Right after an attempt fails, the leader dies. The one that takes over reads the backoff from
  // the record: it heals at once on election, yet does not try the episode again before it is due.
  const waiting = await waitFor(async () => reschedulesIn(await history()).find((d) => d.state === 'failed' && (d.attempts ?? 1) >= 3 && d.retryAt !== undefined), 90_000, { what: 'a failed retry' });
  const leaderIndex = await waitFor(async () => {
    const leads = await Promise.all(schedulers.map(async (scheduler) => (await http('GET', `${scheduler.url}/readyz`)).body.leader as boolean));
    return leads.indexOf(true) + 1 || undefined;
  }, 15_000, { what: 'one leader' }) - 1;
  await schedulers[leaderIndex]!.stop('SIGKILL');
  const successor = schedulers[1 - leaderIndex]!;
  const healed = await waitFor(async () => {
    const ready = (await http('GET', `${successor.url}/readyz`)).body as { leader?: boolean; healedAt?: string };
    return ready.leader && ready.healedAt && Date.parse(ready.healedAt) > Date.parse(waiting.finishedAt!) ? ready.healedAt : undefined;
  }, 30_000, { what: 'the other scheduler to lead and heal' });
  const afterElection = reschedulesIn(await history()).find((d) => d.id === waiting.id)!;
  t.ok(Date.parse(healed) < Date.parse(waiting.retryAt!), `the new leader healed at ${healed}, before the retry was due at ${waiting.retryAt}`);
  t.match(afterElection, { state: 'failed', attempts: waiting.attempts, retryAt: waiting.retryAt }, 'and did not try it again before then');
  schedulers[leaderIndex] = await serveRole('scheduler', await freePort(), schedulerFlags);

  // Minutes of scheduler time: 15 healing checks (one every 10 s), and at least two passes of retention (one a minute).
  const OUTAGE_MS = 150_000;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, failedAt + OUTAGE_MS - Date.now())));

  const during = await history();
  const episodes = reschedulesIn(during);
  t.equal(episodes.length, 1, `one reschedule record for the whole outage (${episodes.map((d) => `${d.id} ${d.state}`).join(', ')})`);
  const attempts = (await journalKinds('service.rescheduled')).length;
  // Without backoff: one attempt per 10 s check, 15 or more. Doubling from 10 s: at about 0, 10, 30, 70 and 150 s.
  t.ok(attempts >= 2 && attempts <= 6, `healing tried ${attempts} times in ${Math.round((Date.now() - failedAt) / 1000)} s, backing off`);
  t.equal(episodes[0]?.attempts, attempts, 'the episode record counts every attempt');
  t.match(episodes[0], { state: 'failed', reason: /Docker engine unreachable/, retryAt: String }, 'it says why it failed and when it is tried again');
  for (const user of users) t.ok(during.some((d) => d.id === user.id), `the user deployment ${user.id} (v${user.release}, ${user.trigger}) is still in the history`);
  // Every notification the receiver will get is sent within seconds (retries 1 s apart).
  await waitFor(async () => ((await http('GET', orch('/notifications/deliveries'))).body as { state: string }[]).every((d) => d.state !== 'pending'), 30_000, { what: 'no delivery pending' });
  t.equal(failureEvents().length, 1, `one failure notified for the episode (${failureEvents().length})`);

  // The failed reschedule took the unit's assignment off the machine (its unit did not run), so
  // the engine's return is a change that retries the episode at once, not after its wait of minutes.
  await engine.resume();
  const resumedAt = Date.now();
  const recovered = await waitFor(async () => reschedulesIn(await history()).find((d) => d.state === 'succeeded'), 90_000, { what: 'the episode to succeed' });
  const seconds = (Date.now() - resumedAt) / 1000;
  t.equal(recovered.id, episodes[0]!.id, 'the episode record itself succeeded');
  t.ok(seconds < 60, `retried as soon as the engine was back (${seconds.toFixed(1)} s; the backoff's wait was ${Math.round((Date.parse(episodes[0]!.retryAt!) - Date.parse(episodes[0]!.finishedAt!)) / 1000)} s)`);
  t.match(recovered, { attempts: Number, units: [{ unit: `${SERVICE}-1.service`, machine: 'only' }] }, 'its last attempt placed the unit');
  t.equal(recovered.retryAt, undefined, 'it is no longer retried');
  await waitFor(unitRunning, 60_000, { what: 'the unit running again' });
  await waitFor(() => received.some((event) => event.event === 'deployment.succeeded' && event.details.deployment === recovered.id), 30_000, { what: 'the recovery notified' });
  t.equal(failureEvents().length, 1, 'still one failure notified');
  const after = await history();
  t.equal(reschedulesIn(after).length, 1, 'still one reschedule record');
  for (const user of users) t.ok(after.some((d) => d.id === user.id), `the user deployment ${user.id} is still in the history`);
});
