import type { Store } from '../../store/store.js';
import { deploymentKey, deploymentPrefix } from '../../store/keys.js';
import { listRecords, readRecord, updateRecord } from '../../store/json-records.js';
import type { Deployment } from '../../schemas/release.js';
import { timeOrderedId } from './ids.js';

export const newDeploymentId = timeOrderedId;

export async function saveNewDeployment(store: Store, deployment: Deployment): Promise<void> {
  await store.put(deploymentKey(deployment.id), JSON.stringify(deployment));
}

export async function getDeployment(store: Store, id: string): Promise<Deployment | undefined> {
  return (await readRecord<Deployment>(store, deploymentKey(id)))?.record;
}

/** Newest first. */
export async function listDeployments(store: Store, service?: string): Promise<Deployment[]> {
  const all = (await listRecords<Deployment>(store, deploymentPrefix)).reverse();
  return service ? all.filter((deployment) => deployment.service === service) : all;
}

export async function updateDeployment(store: Store, id: string, change: Partial<Deployment>): Promise<Deployment | undefined> {
  const updated = await updateRecord<Deployment>(store, deploymentKey(id), (current) => ({
    ...current,
    ...change,
    updatedAt: new Date().toISOString(),
  }));
  return updated?.record;
}

export const isFinished = (deployment: Deployment): boolean =>
  ['succeeded', 'failed', 'reverted', 'superseded'].includes(deployment.state);
