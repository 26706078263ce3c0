import type Docker from 'dockerode';
import type { Store } from '../../store/store.js';
import type { Assignment } from '../../schemas/cluster.js';
import { KEPT_OUTPUT_BYTES, KEPT_OUTPUT_LINES, type UnitOutput } from '../../schemas/unit-output.js';
import { keepUnitOutput } from '../../store/records/unit-outputs.js';
import type { ContainerExit } from './containers.js';
import { lastLines } from './last-output.js';
import { demultiplexedText } from './log-follower.js';

// When a unit's container fails, its last output is read from the engine and kept in the store
// (`platform logs NAME N --previous`): the container is restarted in place, and removed once its
// deployment reverts or the unit moves, and the engine's log goes with it. A container the engine
// refused to create or start has no output of its own: the engine's error is kept as its last line,
// marked as the engine's (ENGINE_MARK), where the program's last words would be.

/** Marks a kept line as the engine's, after the timestamp: the program never wrote it. */
export const ENGINE_MARK = '[engine]';

/** Reads the failed container's last output (none when no container was created) and keeps it as its unit instance's newest failure. */
export async function keepFailedOutput(docker: Docker, store: Store, machineId: string, assignment: Assignment, containerId: string | undefined, exit: ContainerExit): Promise<void> {
  const at = new Date().toISOString();
  const programText = containerId === undefined ? '' : await demultiplexedText(docker, await settledOutput(docker.getContainer(containerId)));
  const text = exit.engineError === undefined ? programText : withEngineLine(programText, at, exit.engineError);
  const { lines, truncated } = lastLines(text, { maxLines: KEPT_OUTPUT_LINES, maxBytes: KEPT_OUTPUT_BYTES });
  const output: UnitOutput = {
    service: assignment.service,
    instance: assignment.instance,
    unit: assignment.unit,
    machine: machineId,
    deployment: assignment.deployment,
    release: assignment.release,
    image: assignment.image,
    ...(containerId === undefined ? {} : { container: containerId }),
    ...(exit.exitCode === undefined ? {} : { exitCode: exit.exitCode }),
    ...exit.failure,
    at,
    lines,
    ...(truncated ? { truncated } : {}),
  };
  await keepUnitOutput(store, output);
}

/** The program's output, then the engine's error as one more line, timestamped like Docker's lines. */
export function withEngineLine(programText: string, at: string, engineError: string): string {
  const ended = programText === '' || programText.endsWith('\n') ? programText : `${programText}\n`;
  return `${ended}${at} ${ENGINE_MARK} ${engineError.replace(/\s*\n\s*/g, ' ').trim()}\n`;
}

/**
 * Reads until two reads agree (at most 5). The engine reports a container exited only once it has
 * copied its output (moby's handleContainerExit: the task's delete waits up to 2 s for the output
 * pipes, the stream copy up to 2 s more, the log copier up to 10 s, then the state and the `die`
 * event): output still unread when one of those waits runs out on a loaded machine is dropped by
 * the engine, and no read brings it back. The reads stay as a cheap guard for engines that order
 * this differently. failed-output.test ran 48 failures (6 containers at once, restarted in place,
 * 3,000 lines and last words without a newline) at load 17 on 2 cores without losing a line
 * (issue 31 item 1); the one line lost in CI is not explained by this path.
 */
async function settledOutput(container: Docker.Container): Promise<Buffer> {
  // One line more than is kept: its presence tells that older output was cut.
  const read = (): Promise<Buffer> => container.logs({ stdout: true, stderr: true, tail: KEPT_OUTPUT_LINES + 1, timestamps: true, follow: false });
  let last = await read();
  for (let attempt = 0; attempt < 4; attempt++) {
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const again = await read();
    if (again.equals(last)) break;
    last = again;
  }
  return last;
}

const SETTLE_MS = 150;
