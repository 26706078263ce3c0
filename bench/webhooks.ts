import { randomBytes } from 'node:crypto';
import { startRegistry } from '../test/harness/registry.js';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { median, ms, printTable } from './table.js';
import { startBenchPlatform } from './bench-platform.js';

// Issue 5's benchmark: push-to-running. The time from `docker push` returning to all units running
// the pushed digest, when a real registry notifies the scheduler, beside the same rollout started
// by hand with POST /hooks/deploy once the push returned (same run, same settings); and how fast a
// registry notification is acknowledged.

const UNITS = 3;
const ROUNDS = 5;
const ACKS = 20;

const platform = await startBenchPlatform(['directory', 'scheduler', 'orchestrator', 'agent'], 'bench-webhooks');
const scheduler = platform.url('scheduler');
// The shared platform's registry notifies nobody (the manual path); this one notifies the scheduler.
const notifying = await startRegistry({ notificationUrl: `${scheduler}/hooks/registry` });

const suffix = randomBytes(2).toString('hex');
const hooked = { name: `hooked-${suffix}`, host: notifying.host, repository: 'bench/hooked' };
const manual = { name: `manual-${suffix}`, host: platform.registry.host, repository: 'bench/manual' };
type Target = typeof hooked;

for (const target of [hooked, manual]) {
  await http('POST', `${platform.url('directory')}/services`, { name: target.name, containerImage: `${target.host}/${target.repository}`, numInstances: UNITS });
  await http('PATCH', `${platform.url('directory')}/services/${target.name}/config`, { maxSurge: UNITS, maxUnavailable: 0 });
}

async function allRunning(target: Target, digest: string): Promise<void> {
  const image = `${target.host}/${target.repository}@${digest}`;
  await waitFor(async () => {
    const units = (await http('GET', `${platform.url('orchestrator')}/services/${target.name}/units`)).body as { image: string; active: string; sub: string }[];
    return units.length === UNITS && units.every((u) => u.image === image && u.active === 'active' && u.sub === 'running');
  }, 120_000, { intervalMs: 20, what: `${target.name} running ${image}` });
}

interface Measured {
  /** Push returned → every unit runs the digest. */
  running: number;
  /** Push returned → the deployment was recorded (negative: the notification beat the push's return). */
  created: number;
}

/** Pushes a new tag and measures from the push returning to every unit running its digest. */
async function pushToRunning(target: Target, tag: string): Promise<Measured> {
  const image = await buildTestImage(platform.engine.docker, target.host, target.repository, tag, { label: tag });
  const pushed = performance.now();
  const pushedAt = Date.now();
  if (target === manual) {
    const reply = await http('POST', `${scheduler}/hooks/deploy`, { serviceName: target.name, containerRepository: image.reference, pushedAt: 0 });
    if (reply.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  }
  await allRunning(target, image.digest);
  const running = performance.now() - pushed;
  const [deployment] = (await http('GET', `${scheduler}/deployments?service=${target.name}`)).body as { createdAt: string }[];
  return { running, created: Date.parse(deployment!.createdAt) - pushedAt };
}

await Promise.all([pushToRunning(hooked, 'warm'), pushToRunning(manual, 'warm')]);
const viaWebhook: Measured[] = [];
const viaManual: Measured[] = [];
for (let round = 0; round < ROUNDS; round++) {
  viaWebhook.push(await pushToRunning(hooked, `r${round}`));
  viaManual.push(await pushToRunning(manual, `r${round}`));
}

// Acknowledgement: a notification of a push no service uses (matched against every declaration).
const acks: number[] = [];
for (let i = 0; i < ACKS; i++) {
  const body = { events: [{ id: `ack-${suffix}-${i}`, timestamp: new Date().toISOString(), action: 'push', target: { mediaType: 'application/vnd.docker.distribution.manifest.v2+json', digest: `sha256:${'0'.repeat(64)}`, repository: 'bench/unused', tag: 'v1' }, request: { host: notifying.host } }] };
  const started = performance.now();
  const reply = await http('POST', `${scheduler}/hooks/registry`, body);
  if (reply.status !== 200) throw new Error(`notification answered ${reply.status}: ${JSON.stringify(reply.body)}`);
  acks.push(performance.now() - started);
}

const webhook = median(viaWebhook.map((m) => m.running));
const byHand = median(viaManual.map((m) => m.running));
const created = median(viaWebhook.map((m) => m.created));
const createdByHand = median(viaManual.map((m) => m.created));
const ack = median(acks);
printTable([
  { benchmark: `push → ${UNITS} units running the pushed digest (registry webhook), median of ${ROUNDS}`, platform: ms(webhook), reference: `${ms(byHand)} (push, then POST /hooks/deploy)`, ratio: `${(webhook / byHand).toFixed(2)}x`, target: '<= 1.2x' },
  { benchmark: `push → deployment recorded, median of ${ROUNDS}`, platform: ms(created), reference: `${ms(createdByHand)} (push, then POST /hooks/deploy)`, ratio: '-', target: '-' },
  { benchmark: `POST /hooks/registry acknowledged, median of ${ACKS}`, platform: ms(ack), reference: '1000 ms (ack budget)', ratio: `${(ack / 1000).toFixed(3)}x`, target: '< 1 s' },
]);
await notifying.stop();
await platform.stop();
