import { randomBytes } from 'node:crypto';
import { startEtcd, type EtcdProcess } from '../test/harness/etcd.js';
import { startDockerd } from '../test/harness/docker.js';
import { startRegistry } from '../test/harness/registry.js';
import { buildTestImage } from '../test/harness/test-image.js';
import { freePort } from '../test/harness/free-port.js';
import { http, serveRole, type PlatformProcess } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { EtcdStore } from '../src/store/etcd-store.js';
import { machineKey, unitStatusPrefix } from '../src/store/keys.js';
import { takeBackup } from '../src/backup/take-backup.js';
import { decodeBackup } from '../src/backup/backup-file.js';
import { restoreBackup } from '../src/backup/restore-backup.js';
import type { UnitStatus } from '../src/schemas/cluster.js';
import { countArgument, loadAverage, median, ms, pairedRatio, printTable } from './table.js';

// Issue 28's restore drill, timed: from an empty new etcd to every unit adopted by the agent,
// through `platform backup restore` and the roles started on the restored store, against the
// reference of the same roles restarted on the store they had. A few real units on a real dockerd;
// "adopted" is the new agent's own word: its machine registered under its new lease and every
// unit's status written under it, running. The containers must be the ones from before (none
// restarted), else the run fails.

const SERVICES = 3;
const UNITS = 2;
/** `node dist/bench/restore-drill.js [ROUNDS]`: 3 by default (each a restart and a drill). */
const ROUNDS = countArgument(process.argv[2], 'ROUNDS', 3);
const MACHINE = 'drill';

const engine = await startDockerd();
const registry = await startRegistry();
const image = await buildTestImage(engine.docker, registry.host, 'drill/web', 'v1');
let etcd: EtcdProcess = await startEtcd();
let roles: (PlatformProcess & { url: string })[] = [];

async function startRoles(on: EtcdProcess): Promise<void> {
  const flags = ['--etcd', on.url];
  roles = await Promise.all([
    serveRole('directory', await freePort(), flags),
    serveRole('scheduler', await freePort(), flags),
    serveRole('orchestrator', await freePort(), flags),
    serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', MACHINE, '--stop-grace', '1'], { DOCKER_HOST: engine.dockerHost }),
  ]);
}

const stopRoles = async (): Promise<void> => {
  await Promise.all(roles.map((role) => role.stop()));
  roles = [];
};

/** The lease the agent's machine registration is held under, in `on`. */
async function machineLease(on: EtcdProcess): Promise<string | undefined> {
  const store = new EtcdStore([on.url]);
  try {
    return (await store.get(machineKey(MACHINE)))?.lease;
  } finally {
    await store.close();
  }
}

/** Until the agent started after `previousLease` has registered and reported every unit running under its own lease. */
async function adopted(on: EtcdProcess, previousLease: string | undefined): Promise<void> {
  const store = new EtcdStore([on.url]);
  try {
    await waitFor(async () => {
      const lease = (await store.get(machineKey(MACHINE)))?.lease;
      if (lease === undefined || lease === previousLease) return false;
      const statuses = await store.list(unitStatusPrefix(MACHINE));
      return (
        statuses.length === SERVICES * UNITS &&
        statuses.every((kv) => {
          const status = JSON.parse(kv.value) as UnitStatus;
          return kv.lease === lease && status.active === 'active' && status.sub === 'running';
        })
      );
    }, 180_000, { intervalMs: 20, what: 'every unit adopted by the new agent' });
  } finally {
    await store.close();
  }
}

async function unitContainers(): Promise<string> {
  const listed = await engine.docker.listContainers({ all: true, filters: { label: ['platform.service'] } });
  const inspected = await Promise.all(listed.map((c) => engine.docker.getContainer(c.Id).inspect()));
  return inspected.map((c) => `${c.Name} ${c.Id} ${c.State.StartedAt} ${c.State.Running}`).sort().join('\n');
}

const restartTimes: number[] = [];
const drillTimes: number[] = [];
try {
  await startRoles(etcd);
  const [directory, scheduler, orchestrator] = roles.map((role) => role.url);
  for (let s = 0; s < SERVICES; s++) {
    const service = `drill-${s}-${randomBytes(2).toString('hex')}`;
    await http('POST', `${directory}/services`, { name: service, containerImage: `${registry.host}/drill/web`, numInstances: UNITS });
    const reply = await http('POST', `${scheduler}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
    if (reply.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  }
  await waitFor(async () => {
    const deployments = (await http('GET', `${scheduler}/deployments`)).body as { state: string }[];
    const units = (await http('GET', `${orchestrator}/cluster/units`)).body as { active: string; sub: string }[];
    return deployments.length === SERVICES && deployments.every((d) => d.state === 'succeeded') && units.filter((u) => u.sub === 'running').length === SERVICES * UNITS;
  }, 180_000, { what: 'every service deployed' });
  const containers = await unitContainers();
  const source = new EtcdStore([etcd.url]);
  const backup = decodeBackup((await takeBackup(source)).text);
  await source.close();

  for (let round = 0; round < ROUNDS; round++) {
    // The reference: every role restarted on the store it had.
    let previous = await machineLease(etcd);
    await stopRoles();
    let started = performance.now();
    await startRoles(etcd);
    await adopted(etcd, previous);
    restartTimes.push(performance.now() - started);

    // The drill: the store lost, a new empty etcd, the backup restored into it, every role started on it.
    previous = await machineLease(etcd);
    await stopRoles();
    await etcd.stop();
    etcd = await startEtcd();
    started = performance.now();
    const target = new EtcdStore([etcd.url]);
    await restoreBackup(target, backup, { force: false });
    await target.close();
    await startRoles(etcd);
    await adopted(etcd, previous);
    drillTimes.push(performance.now() - started);
    if ((await unitContainers()) !== containers) throw new Error(`round ${round + 1}: a unit container was recreated or restarted`);
  }
} finally {
  await stopRoles();
  await etcd.stop();
  await registry.stop();
  await engine.stop();
}

console.log(`\nRestore drill, ${SERVICES} services x ${UNITS} units on one agent, ${ROUNDS} rounds (load average ${loadAverage()})`);
printTable([
  {
    benchmark: 'restore drill: empty new etcd to every unit adopted (restore + roles started)',
    platform: ms(median(drillTimes)),
    reference: `${ms(median(restartTimes))} (roles restarted on the old store)`,
    ratio: pairedRatio(drillTimes, restartTimes),
    target: 'no unit restarted',
  },
]);
