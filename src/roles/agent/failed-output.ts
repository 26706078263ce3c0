import type Docker from 'dockerode';
import type { Store } from '../../store/store.js';
import type { Assignment } from '../../schemas/cluster.js';
import { KEPT_OUTPUT_BYTES, KEPT_OUTPUT_LINES, type UnitOutput } from '../../schemas/unit-output.js';
import { keepUnitOutput } from '../../store/records/unit-outputs.js';
import type { ContainerExit } from './containers.js';
import { demultiplexed, lastLines } from './last-output.js';

// When a unit's container fails, its last output is read from the engine and kept in the store
// (`platform logs NAME N --previous`): the container is restarted in place, and removed once its
// deployment reverts or the unit moves, and the engine's log goes with it.

/** Reads the failed container's last output and keeps it as its unit instance's newest failure. */
export async function keepFailedOutput(docker: Docker, store: Store, machineId: string, assignment: Assignment, containerId: string, exit: ContainerExit): Promise<void> {
  const raw = await docker.getContainer(containerId).logs({ stdout: true, stderr: true, tail: KEPT_OUTPUT_LINES, timestamps: true, follow: false });
  const { lines, truncated } = lastLines(demultiplexed(raw), { maxLines: KEPT_OUTPUT_LINES, maxBytes: KEPT_OUTPUT_BYTES });
  const output: UnitOutput = {
    service: assignment.service,
    instance: assignment.instance,
    unit: assignment.unit,
    machine: machineId,
    deployment: assignment.deployment,
    release: assignment.release,
    image: assignment.image,
    container: containerId,
    exitCode: exit.exitCode,
    ...exit.failure,
    at: new Date().toISOString(),
    lines,
    ...(truncated ? { truncated } : {}),
  };
  await keepUnitOutput(store, output);
}
