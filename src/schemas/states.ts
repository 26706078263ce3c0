// The words a unit's and a deployment's state are told in, each list written once. The schemas
// build their unions from these lists (cluster.ts, release.ts); the dashboard loads this module
// as it is, so it imports nothing: it must run in the browser without the server's packages.

/** What systemd calls a unit's ActiveState, as fleet shows it. */
export const unitActiveStates = ['activating', 'active', 'deactivating', 'inactive', 'failed'] as const;

/** What systemd calls its SubState: what the unit's process is doing. */
export const unitSubStates = ['start-pre', 'running', 'exited', 'dead', 'failed', 'auto-restart'] as const;

export const deploymentStates = ['pending', 'pulling', 'rolling', 'succeeded', 'failed', 'reverted', 'superseded'] as const;

type DeploymentStateName = (typeof deploymentStates)[number];

/** The states a deployment ends in: nothing moves it on from there. */
export const finishedDeploymentStates: readonly DeploymentStateName[] = ['succeeded', 'failed', 'reverted', 'superseded'];

export const isFinished = (deployment: { state: DeploymentStateName }): boolean => finishedDeploymentStates.includes(deployment.state);

/** Green in the dashboard: the unit runs. */
export const isRunning = (unit: { active: (typeof unitActiveStates)[number]; sub: (typeof unitSubStates)[number] }): boolean =>
  unit.active === 'active' && unit.sub === 'running';

/**
 * The deployment that decides what the service runs now (from newest-first records): the newest
 * one in flight or succeeded, unless that is a stop, after which the service runs nothing.
 */
export const currentTarget = <D extends { state: DeploymentStateName; trigger?: string }>(deployments: D[]): D | undefined => {
  const target = deployments.find((d) => !isFinished(d) || d.state === 'succeeded');
  return target?.trigger === 'stop' ? undefined : target;
};
