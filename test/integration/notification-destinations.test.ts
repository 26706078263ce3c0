import t from 'tap';
import { createServer, type Server } from 'node:http';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { recordObservedEvent } from '../../src/notifications/outbox.js';
import { deploymentEvent } from '../../src/notifications/events.js';
import type { NotifyDelivery } from '../../src/schemas/notification.js';

// Notification endpoints follow the registries' destination rule (docs/notifications.md), on a
// real etcd with an orchestrator and a scheduler as processes: an endpoint on a loopback, private
// or link-local address (or a name that resolves only to such) is refused when added unless the
// operator names it with --allowed-notification-destination; a scheduler without that flag
// refuses to deliver to one anyway (DNS can change after the check), and one with it delivers.

const etcd = await startEtcd();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const allow = ['--allowed-notification-destination', '127.0.0.1'];
const strict = await serveRole('orchestrator', await freePort(), flags);
const permissive = await serveRole('orchestrator', await freePort(), [...flags, ...allow]);
const store = new EtcdStore([etcd.url]);

/** The receiver a delivery must not reach without the operator's consent: it counts what it gets. */
const received: string[] = [];
const receiverPort = await freePort();
const receiver: Server = createServer((request, response) => {
  received.push(request.url ?? '');
  response.end();
});
await new Promise<void>((resolve) => receiver.listen(receiverPort, '127.0.0.1', resolve));

t.teardown(async () => {
  receiver.close();
  await Promise.all([strict.stop(), permissive.stop()]);
  await store.close();
  await etcd.stop();
});

const rule = 'endpoints on loopback, private, link-local and other special addresses need --allowed-notification-destination';

t.test('an endpoint on a special address is refused 400 naming the url and the rule, and nothing is stored', async (t) => {
  const refused: [string, RegExp][] = [
    [`http://127.0.0.1:${receiverPort}/hook`, /^url http:\/\/127\.0\.0\.1:\d+ is not allowed: 127\.0\.0\.1 is a loopback address; /],
    ['http://169.254.169.254/latest/meta-data', /^url http:\/\/169\.254\.169\.254 is not allowed: 169\.254\.169\.254 is a link-local address; /],
    ['https://10.1.2.3/hook', /^url https:\/\/10\.1\.2\.3 is not allowed: 10\.1\.2\.3 is a private address; /],
    ['http://[::1]:9/hook', /^url http:\/\/\[::1\]:9 is not allowed: ::1 is a loopback address; /],
    [`http://localhost:${receiverPort}/hook`, /^url http:\/\/localhost:\d+ is not allowed: localhost resolves only to addresses not allowed: /],
  ];
  for (const [url, message] of refused) {
    const reply = await http('POST', `${strict.url}/notifications/endpoints`, { url });
    t.equal(reply.status, 400, url);
    t.match(reply.body.message, message, url);
    t.ok(String(reply.body.message).endsWith(rule), `${url}: the rule`);
  }
  t.same((await http('GET', `${strict.url}/notifications/endpoints`)).body, [], 'nothing was added');
});

t.test('the operator allows a destination by name; a scheduler without the flag refuses to deliver there, one with it delivers', async (t) => {
  const ids: string[] = [];
  for (const url of [`http://127.0.0.1:${receiverPort}/by-address`, `http://localhost:${receiverPort}/by-name`]) {
    const added = await http('POST', `${permissive.url}/notifications/endpoints`, { url });
    t.equal(added.status, 201, `${url}: ${JSON.stringify(added.body)}`);
    ids.push(added.body.endpoint.id);
  }
  const schedulerFlags = [...flags, '--notify-retry', '1s', '--notify-timeout', '2'];
  const unallowed = await serveRole('scheduler', await freePort(), schedulerFlags);
  t.teardown(() => unallowed.stop());
  const deployment = { id: 'd-destinations', service: 'web', release: 1, image: 'registry.example/web@sha256:' + 'a'.repeat(64), trigger: 'manual' as const };
  const event = deploymentEvent(deployment, 'started', new Date().toISOString());
  t.ok(await recordObservedEvent(store, event), 'the event is in the outbox');
  const deliveries = async () =>
    ((await http('GET', `${strict.url}/notifications/deliveries`)).body as NotifyDelivery[]).filter((delivery) => delivery.event.id === event.id);
  const attempted = await waitFor(async () => {
    const found = await deliveries();
    return found.length === 2 && found.every((delivery) => delivery.attempts >= 1) ? found : undefined;
  }, 30_000, { what: 'both deliveries to be attempted' });
  for (const delivery of attempted) {
    t.equal(delivery.state, 'pending', `${delivery.url}: kept for a retry`);
    const refusal = /(127\.0\.0\.1 is a loopback address|localhost resolves only to addresses not allowed: .*\(loopback\))/;
    t.match(delivery.error, refusal, `${delivery.url}: the refusal`);
    t.ok(delivery.error?.endsWith(rule), `${delivery.url}: names the rule`);
  }
  t.same(received, [], 'the receiver got nothing');
  await unallowed.stop();

  const allowed = await serveRole('scheduler', await freePort(), [...schedulerFlags, ...allow]);
  t.teardown(() => allowed.stop());
  await waitFor(async () => (await deliveries()).every((delivery) => delivery.state === 'delivered'), 30_000, { what: 'both deliveries to be delivered' });
  t.same(received.sort(), ['/by-address', '/by-name'], 'each endpoint got the event once');
  for (const id of ids) t.equal((await http('DELETE', `${permissive.url}/notifications/endpoints/${id}`)).status, 204);
});
