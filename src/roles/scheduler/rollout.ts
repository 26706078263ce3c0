import type { FastifyBaseLogger } from 'fastify';
import type { Operation, Store } from '../../store/store.js';
import { assignmentKey } from '../../store/keys.js';
import type { Assignment, UnitStatus } from '../../schemas/cluster.js';
import type { Deployment, Release } from '../../schemas/release.js';
import type { Service } from '../../schemas/service.js';
import { planService } from '../../scheduler/planner.js';
import { isRunning, unitName } from '../../units.js';
import { plannerMachine, readClusterSnapshot, readUnitStatuses, serviceRules } from './cluster-snapshot.js';
import { updateDeployment } from './deployments.js';
import { appendJournal } from './journal.js';

export interface RolloutOptions {
  store: Store;
  log: FastifyBaseLogger;
  /** A deployment that has not finished by then fails. */
  progressDeadlineSeconds: number;
  pollIntervalMs?: number;
}

/** Failures no waiting will cure: the deployment fails at once with the agent's reason. */
const isPermanentFailure = (status: UnitStatus): boolean =>
  status.active === 'failed' && /^(image pull failed|Docker engine unreachable)/.test(status.error ?? '');

/**
 * Plans the release's units, writes the assignments in one transaction, and waits until every
 * unit runs the release (or fails). First version: each agent replaces a unit in place
 * (stop, then start).
 */
export async function rollOut(options: RolloutOptions, service: Service, release: Release, deployment: Deployment): Promise<Deployment> {
  const { store } = options;
  const snapshot = await readClusterSnapshot(store);
  const rules = [...snapshot.services.filter((s) => s.name !== service.name), { ...service, config: release.config }].map(serviceRules);
  const plan = planService({
    machines: snapshot.machines.map(plannerMachine),
    current: snapshot.assignments,
    rules,
    service: service.name,
    instances: release.config.numInstances,
  });
  if (plan.unplaced.length > 0) {
    return finish(options, deployment, 'failed', plan.unplaced[0]!.reason);
  }

  const now = new Date().toISOString();
  const assignments: Assignment[] = plan.place.map(({ instance, machine }) => ({
    unit: unitName(service.name, instance),
    service: service.name,
    instance,
    machine,
    release: release.version,
    image: release.image,
    ports: release.config.ports,
    env: release.config.env,
    deployment: deployment.id,
    assignedAt: now,
  }));
  const operations: Operation[] = [
    ...plan.stop.map((unit): Operation => ({ op: 'delete', key: assignmentKey(unit.machine, unitName(unit.service, unit.instance)) })),
    ...assignments.map((a): Operation => ({ op: 'put', key: assignmentKey(a.machine, a.unit), value: JSON.stringify(a) })),
  ];
  if (operations.length > 0) await store.txn([], operations);
  await updateDeployment(store, deployment.id, { state: 'rolling', units: assignments.map(pendingProgress) });
  return waitForUnits(options, deployment, assignments);
}

type UnitProgress = Deployment['units'][number];
const pendingProgress = (a: Assignment): UnitProgress => ({ unit: a.unit, machine: a.machine, active: 'inactive', sub: 'dead' });

async function waitForUnits(options: RolloutOptions, deployment: Deployment, wanted: Assignment[]): Promise<Deployment> {
  const deadline = Date.now() + options.progressDeadlineSeconds * 1000;
  let lastProgress = '';
  for (;;) {
    const statuses = (await readUnitStatuses(options.store)).filter((status) => status.service === deployment.service);
    const progress = wanted.map((a): UnitProgress => {
      const status = statuses.find((s) => s.unit === a.unit && s.machine === a.machine && s.release === a.release);
      return status
        ? { unit: a.unit, machine: a.machine, active: status.active, sub: status.sub, ...(status.error ? { error: status.error } : {}) }
        : pendingProgress(a);
    });
    const serialized = JSON.stringify(progress);
    if (serialized !== lastProgress) {
      lastProgress = serialized;
      await updateDeployment(options.store, deployment.id, { units: progress });
    }
    const strays = statuses.filter((s) => !wanted.some((a) => a.unit === s.unit && a.machine === s.machine));
    if (progress.every(isRunning) && strays.length === 0) {
      return finish(options, deployment, 'succeeded', `${wanted.length} units run release v${deployment.release}`);
    }
    const broken = statuses.find((s) => s.release === deployment.release && isPermanentFailure(s));
    if (broken) return finish(options, deployment, 'failed', `${broken.unit} on ${broken.machine}: ${broken.error}`);
    if (Date.now() > deadline) {
      const waiting = progress.filter((p) => !isRunning(p)).map((p) => `${p.unit} on ${p.machine} is ${p.active}/${p.sub}${p.error ? ` (${p.error})` : ''}`);
      const reason = waiting.length > 0 ? waiting.join('; ') : `units still stopping: ${strays.map((s) => s.unit).join(', ')}`;
      return finish(options, deployment, 'failed', `not ready within ${options.progressDeadlineSeconds} s: ${reason}`);
    }
    await new Promise((resolve) => setTimeout(resolve, options.pollIntervalMs ?? 100));
  }
}

async function finish(options: RolloutOptions, deployment: Deployment, state: 'succeeded' | 'failed', reason: string): Promise<Deployment> {
  const finishedAt = new Date().toISOString();
  const updated = await updateDeployment(options.store, deployment.id, { state, finishedAt, ...(state === 'failed' ? { reason } : {}) });
  await appendJournal(options.store, { service: deployment.service, deployment: deployment.id, kind: `deployment.${state}`, message: `v${deployment.release}: ${reason}` });
  options.log.info({ deployment: deployment.id, service: deployment.service, state, reason }, 'deployment finished');
  return updated ?? { ...deployment, state, finishedAt };
}
