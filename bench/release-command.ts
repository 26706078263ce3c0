import { randomBytes } from 'node:crypto';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { median, ms, printTable } from './table.js';
import { pullImage, startBenchPlatform } from './bench-platform.js';
import { watchCluster } from './cluster-events.js';

// What a release command costs a deploy (issue 32): a deploy of one unit with a no-op release
// command (`true`), against the same deploy without one, alternating, in the same run. Each deploy
// changes the env, so each makes a new release whose unit replaces the running one; the time is from
// the deploy request to its deployment's success (told by the orchestrator's event stream).

const ROUNDS = 5;

const platform = await startBenchPlatform(['directory', 'scheduler', 'orchestrator', 'agent'], 'bench-release-command');
const { engine, registry } = platform;
const image = await buildTestImage(engine.docker, registry.host, 'bench/release-command', 'a');
await pullImage(engine, `${registry.host}/bench/release-command@${image.digest}`);
const service = `migrate-${randomBytes(2).toString('hex')}`;
await http('POST', `${platform.url('directory')}/services`, { name: service, containerImage: `${registry.host}/bench/release-command`, numInstances: 1 });
const watched = await watchCluster(platform.url('orchestrator'));

let round = 0;
async function timedDeploy(releaseCommand: string[] | null): Promise<number> {
  round += 1;
  const patched = await http('PATCH', `${platform.url('directory')}/services/${service}/config`, { env: { ROUND: String(round) }, releaseCommand });
  if (patched.status !== 200) throw new Error(`config patch failed: ${JSON.stringify(patched.body)}`);
  const started = performance.now();
  const reply = await http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  if (reply.status !== 200 || reply.body.outcome !== 'created') throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  const id = reply.body.deployment as string;
  let deployment: { state: string; reason?: string } | undefined;
  const ended = await watched.until(({ deployments }) => {
    deployment = [...deployments.values()].find((d) => d.id === id && ['succeeded', 'failed', 'reverted'].includes(d.state));
    return deployment !== undefined;
  });
  if (deployment?.state !== 'succeeded') throw new Error(`deployment ${id} ${deployment?.state}: ${deployment?.reason}`);
  return ended - started;
}

await timedDeploy(null);
const without: number[] = [];
const withCommand: number[] = [];
for (let i = 0; i < ROUNDS; i++) {
  without.push(await timedDeploy(null));
  withCommand.push(await timedDeploy(['sh', '-c', ':']));
}
console.log(`release command rounds (ms): without ${without.map(ms).join(', ')}; with a no-op command ${withCommand.map(ms).join(', ')}`);
printTable([
  {
    benchmark: 'deploy of 1 unit (new release) with a no-op release command: deployment succeeded',
    platform: ms(median(withCommand)),
    reference: `${ms(median(without))} (the same deploy without a release command)`,
    ratio: `${(median(withCommand) / median(without)).toFixed(2)}x`,
    target: '-',
  },
]);
watched.close();
await platform.stop();
