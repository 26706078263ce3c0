import t from 'tap';
import { createHmac } from 'node:crypto';
import { signBody } from '../../src/notifications/signature.js';
import { defaultRetryPolicy, nextAttemptAt, retryDelayMs, type RetryPolicy } from '../../src/notifications/retry-schedule.js';
import { deploymentEvent, endpointWants, eventId, machineLostEvent, unitFailedEvent } from '../../src/notifications/events.js';
import { afterAttempt } from '../../src/notifications/outbox.js';
import { EndpointUrlError, endpointUrl } from '../../src/notifications/endpoints.js';
import { orchestratorApi } from '../../src/schemas/api.js';
import { routeAccess } from '../../src/auth/access.js';
import { splitRouteKey } from '../../src/schemas/route-key.js';
import type { UnitStatus } from '../../src/schemas/cluster.js';
import type { NotifyDelivery } from '../../src/schemas/notification.js';

// The pure parts of outbound notifications: signatures, the retry schedule, event ids and which
// endpoint takes which event.

const deployment = { id: '00abc1234-0011aabb', service: 'web', release: 3, image: 'reg/web@sha256:1', trigger: 'manual' };

t.test('the signature is sha256= and the hex HMAC-SHA256 of the exact body with the secret, as GitHub signs', async (t) => {
  const body = JSON.stringify({ id: 'x', text: 'héllo' });
  const expected = createHmac('sha256', 'whsec_key').update(Buffer.from(body, 'utf8')).digest('hex');
  t.equal(signBody('whsec_key', body), `sha256=${expected}`);
  t.equal(signBody('whsec_key', Buffer.from(body)), `sha256=${expected}`, 'the same over the bytes a receiver reads');
  t.not(signBody('other', body), `sha256=${expected}`, 'another secret, another signature');
  t.match(signBody('k', ''), /^sha256=[0-9a-f]{64}$/);
});

t.test('retries back off exponentially from the first delay, with jitter, up to the cap', async (t) => {
  const policy: RetryPolicy = { firstRetryMs: 10_000, maxRetryMs: 3_600_000, giveUpAfterMs: 86_400_000 };
  t.same([1, 2, 3, 4].map((n) => retryDelayMs(policy, n, 0)), [5_000, 10_000, 20_000, 40_000], 'no luck: half of 10 s doubling');
  t.same([1, 2, 3, 4].map((n) => retryDelayMs(policy, n, 0.999999)), [10_000, 20_000, 40_000, 80_000], 'most luck: the whole delay');
  t.equal(retryDelayMs(policy, 30, 0), 1_800_000, 'capped at an hour (half of it fixed)');
  t.ok(retryDelayMs(policy, 30, 0.999999) <= 3_600_000, 'capped at an hour');
  t.equal(retryDelayMs(policy, 10_000, 0.5), 2_700_000, 'huge attempt counts do not overflow');
  for (let attempt = 1; attempt < 20; attempt++) {
    const delay = retryDelayMs(policy, attempt, Math.random());
    const full = Math.min(3_600_000, 10_000 * 2 ** (attempt - 1));
    t.ok(delay >= full / 2 && delay <= full, `attempt ${attempt}: ${delay} ms within [${full / 2}, ${full}]`);
  }
});

t.test('a delivery is given up once the next try would fall beyond the give-up window from its creation', async (t) => {
  const created = Date.parse('2026-01-01T00:00:00Z');
  t.equal(nextAttemptAt(defaultRetryPolicy, created, 1, created + 1000, 0), created + 6000, 'the first retry 5-10 s later');
  t.equal(nextAttemptAt(defaultRetryPolicy, created, 40, created + 23 * 3_600_000, 0), created + 23.5 * 3_600_000, 'still within 24 h');
  t.equal(nextAttemptAt(defaultRetryPolicy, created, 40, created + 23.9 * 3_600_000, 0), undefined, 'beyond 24 h: given up');
  // Over 24 h of failures the schedule makes a few dozen attempts, not thousands.
  let now = created;
  let attempts = 0;
  for (let next: number | undefined = created; next !== undefined; next = nextAttemptAt(defaultRetryPolicy, created, attempts, now, 0.5)) {
    now = next;
    attempts += 1;
  }
  t.ok(attempts > 20 && attempts < 60, `${attempts} attempts in 24 h`);
  t.ok(now - created <= 86_400_000, 'the last one within 24 h');
});

t.test('an attempt moves a delivery on: delivered on a 2xx, pending with a retry time, failed once given up', async (t) => {
  const created = '2026-01-01T00:00:00.000Z';
  const event = deploymentEvent(deployment, 'succeeded', created);
  const pending: NotifyDelivery = { event, endpoint: 'aaaaaaaaaaaa', url: 'http://x/', state: 'pending', attempts: 0, createdAt: created, updatedAt: created, nextAttemptAt: created };
  const start = Date.parse(created);
  const delivered = afterAttempt(pending, { statusCode: 204 }, defaultRetryPolicy, start + 100);
  t.match(delivered, { state: 'delivered', attempts: 1, statusCode: 204 });
  t.notOk('nextAttemptAt' in delivered, 'no next attempt');
  const retried = afterAttempt(pending, { statusCode: 503 }, defaultRetryPolicy, start + 100);
  t.match(retried, { state: 'pending', attempts: 1, statusCode: 503, error: 'HTTP 503' });
  t.ok(Date.parse(retried.nextAttemptAt!) >= start + 5100, 'retried after the first delay');
  const refused = afterAttempt(retried, { error: 'connect ECONNREFUSED 127.0.0.1:9' }, defaultRetryPolicy, start + 10_000);
  t.match(refused, { state: 'pending', attempts: 2, error: 'connect ECONNREFUSED 127.0.0.1:9' });
  t.notOk('statusCode' in refused, 'no status from an attempt that got none');
  const late = afterAttempt({ ...refused, attempts: 30 }, { statusCode: 500 }, defaultRetryPolicy, start + 86_000_000);
  t.match(late, { state: 'failed', attempts: 31, error: 'given up after 31 attempts: HTTP 500' });
  t.same(afterAttempt(late, { statusCode: 200 }, defaultRetryPolicy, start).event.id, event.id, 'the event, and its id, never change');
});

t.test('event ids derive from the cause: the same cause gives the same id on any scheduler, another cause another id', async (t) => {
  const at = '2026-01-01T00:00:00.000Z';
  t.equal(deploymentEvent(deployment, 'failed', at, 'x').id, deploymentEvent(deployment, 'failed', '2026-02-02T00:00:00.000Z', 'y').id, 'time and reason do not change it');
  t.not(deploymentEvent(deployment, 'failed', at).id, deploymentEvent(deployment, 'reverted', at).id, 'another state');
  t.not(deploymentEvent(deployment, 'started', at).id, deploymentEvent({ ...deployment, id: '00abc1234-0011aabc' }, 'started', at).id, 'another deployment');
  t.equal(deploymentEvent(deployment, 'started', at).id, eventId('deployment.started', deployment.id));
  t.match(eventId('machine.lost', 'm1', 7), /^[0-9a-f]{32}$/);
  const status: UnitStatus = { unit: 'web-1.service', service: 'web', instance: 1, machine: 'm1', release: 3, spec: 'abc', image: 'reg/web@sha256:1', active: 'failed', sub: 'auto-restart', restarts: 2, error: 'exited with 1', errorKind: 'crash-loop', updatedAt: at };
  t.equal(unitFailedEvent(status, 41).id, unitFailedEvent({ ...status, updatedAt: '2027-01-01T00:00:00Z' }, 41).id, 'one status write, one id');
  t.not(unitFailedEvent(status, 41).id, unitFailedEvent(status, 42).id, 'a later failure is another event');
  t.not(unitFailedEvent(status, 41).id, unitFailedEvent({ ...status, machine: 'm2' }, 41).id);
  t.equal(machineLostEvent('m1', 9, ['b', 'a', 'b'], at).id, machineLostEvent('m1', 9, [], '2030-01-01T00:00:00Z').id);
  t.not(machineLostEvent('m1', 9, [], at).id, machineLostEvent('m1', 10, [], at).id, 'the machine lost again later');
});

t.test('events carry a Slack-compatible text, escaped as Slack asks', async (t) => {
  const at = '2026-01-01T00:00:00.000Z';
  const failed = deploymentEvent(deployment, 'failed', at, 'web needs <4> machines & 3 qualify');
  t.match(failed, { event: 'deployment.failed', service: 'web', timestamp: at, details: { deployment: deployment.id, release: 3, image: deployment.image, trigger: 'manual', reason: 'web needs <4> machines & 3 qualify' } });
  t.equal(failed.text, 'web: deployment of v3 failed: web needs &lt;4&gt; machines &amp; 3 qualify');
  t.equal(deploymentEvent(deployment, 'succeeded', at).text, 'web: v3 deployed: reg/web@sha256:1');
  t.notOk('reason' in deploymentEvent(deployment, 'succeeded', at).details);
  const lost = machineLostEvent('m2', 9, ['web', 'api', 'web'], at);
  t.match(lost, { service: null, details: { machine: 'm2', services: ['api', 'web'] }, text: 'machine m2 lost; it ran units of api, web' });
});

t.test('an endpoint takes the events it names, of the services its glob matches; a machine matches through its services', async (t) => {
  const at = '2026-01-01T00:00:00.000Z';
  const succeeded = deploymentEvent(deployment, 'succeeded', at);
  t.ok(endpointWants({}, succeeded), 'no filter: everything');
  t.ok(endpointWants({ events: ['deployment.succeeded'] }, succeeded));
  t.notOk(endpointWants({ events: ['deployment.failed'] }, succeeded));
  t.ok(endpointWants({ services: 'w*' }, succeeded));
  t.notOk(endpointWants({ services: 'api-*' }, succeeded));
  t.ok(endpointWants({ services: 'api-*' }, machineLostEvent('m1', 1, ['api-1'], at)));
  t.notOk(endpointWants({ services: 'api-*' }, machineLostEvent('m1', 1, ['web'], at)));
  t.notOk(endpointWants({ services: 'api-*' }, machineLostEvent('m1', 1, [], at)), 'an empty machine concerns no service');
  t.ok(endpointWants({}, machineLostEvent('m1', 1, [], at)));
});

t.test('an endpoint URL is http or https, without credentials', async (t) => {
  t.equal(endpointUrl('https://hooks.example.com/services/T0/B0/x?y=1'), 'https://hooks.example.com/services/T0/B0/x?y=1');
  t.equal(endpointUrl('http://127.0.0.1:8080'), 'http://127.0.0.1:8080/');
  t.throws(() => endpointUrl('ftp://example.com/'), new EndpointUrlError('url must be an http:// or https:// URL'));
  t.throws(() => endpointUrl('not a url'), EndpointUrlError);
  t.throws(() => endpointUrl('https://user:pw@example.com/'), /must not carry credentials/);
  t.throws(() => endpointUrl('https://user@example.com/'), /must not carry credentials/);
});

t.test('every notification route needs an admin token', async (t) => {
  const routes = Object.entries(orchestratorApi).filter(([key]) => key.includes('/notifications/'));
  t.equal(routes.length, 4);
  for (const [key, schema] of routes) {
    const { method } = splitRouteKey(key as keyof typeof orchestratorApi);
    t.equal(routeAccess(method, schema as { access?: 'admin' }).access, 'admin', key);
  }
});
