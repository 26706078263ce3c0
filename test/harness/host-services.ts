import type { TestHosts } from './test-hosts.js';
import { http } from './platform.js';
import { waitFor } from './wait.js';

// Services on test hosts, through an orchestrator: declare the test image's repository, deploy
// it, and wait for units. Shared by the tests that run a cluster of test hosts.

export interface HostUnit {
  unit: string;
  instance: number;
  machine: string;
  active: string;
  sub: string;
  address?: string;
}

export const isRunning = (u: HostUnit): boolean => u.active === 'active' && u.sub === 'running';

export interface HostServices {
  unitsOf(service: string): Promise<HostUnit[]>;
  /** Declares the service (or finds it declared), returning the orchestrator's answer status. */
  declare(name: string, numInstances: number, conflictsWith?: string): Promise<number>;
  /** Asks for a deploy of the test image; returns the deployment id, or throws with the answer. */
  deploy(name: string): Promise<string>;
  /** Waits for a deployment to end; throws unless it succeeded. */
  succeeded(deployment: string, timeoutMs?: number): Promise<void>;
  declareAndDeploy(name: string, numInstances: number, conflictsWith?: string): Promise<void>;
  /** Waits until `count` units run, none on `off`. */
  settled(service: string, count: number, off?: string): Promise<HostUnit[]>;
}

export function hostServices(orchestratorUrl: string, cluster: TestHosts): HostServices {
  const orch = (path: string) => `${orchestratorUrl}${path}`;
  const unitsOf = async (service: string): Promise<HostUnit[]> => (await http('GET', orch(`/services/${service}/units`))).body;
  const declare = async (name: string, numInstances: number, conflictsWith = ''): Promise<number> => {
    const created = await http('POST', orch('/services'), {
      name,
      description: 'test hosts',
      containerRepository: `${cluster.registry.host}/${cluster.repository}`,
      loadBalanced: true,
      publicFacing: false,
      numInstances,
      conflictsWith,
    });
    if (created.status !== 201) throw new Error(`declaring ${name}: ${created.status} ${JSON.stringify(created.body)}`);
    return created.status;
  };
  const deploy = async (name: string): Promise<string> => {
    const reply = await http('POST', orch(`/services/${name}/deploy`), { containerRepository: cluster.image.reference });
    if (reply.status !== 200) throw new Error(`deploying ${name}: ${reply.status} ${JSON.stringify(reply.body)}`);
    return reply.body.deployment as string;
  };
  const succeeded = async (deployment: string, timeoutMs = 120_000): Promise<void> => {
    const outcome = await waitFor(async () => {
      const record = (await http('GET', orch(`/deployments/${deployment}`))).body;
      return ['succeeded', 'failed', 'reverted', 'superseded'].includes(record.state) ? record : undefined;
    }, timeoutMs, { what: `deployment ${deployment}` });
    if (outcome.state !== 'succeeded') throw new Error(`deployment ${deployment} ${outcome.state}: ${outcome.reason}`);
  };
  return {
    unitsOf,
    declare,
    deploy,
    succeeded,
    declareAndDeploy: async (name, numInstances, conflictsWith = '') => {
      await declare(name, numInstances, conflictsWith);
      await succeeded(await deploy(name));
    },
    settled: (service, count, off) =>
      waitFor(async () => {
        const units = await unitsOf(service);
        return units.length === count && units.every(isRunning) && units.every((u) => u.machine !== off) ? units : undefined;
      }, 60_000, { what: `${count} running units of ${service}${off ? ` off ${off}` : ''}` }),
  };
}
