import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';
import type { OrchestratorClient } from './orchestrator-client.js';
import { table } from './table.js';
import type { JobView } from '../schemas/job.js';

// `platform run` and `platform jobs` (docs/jobs.md): one-off jobs of a service's release.

const print = (text: string) => process.stdout.write(text);
const say = (text: string) => process.stderr.write(`platform: ${text}\n`);

/** The CLI's exit code for how a job ended: its own for an exit, 130 for a stop (as after Ctrl-C), 124 for a timeout (as timeout(1)). */
export function exitCodeOf(job: Pick<JobView, 'state' | 'exitCode'>): number {
  if (job.state === 'exited') return job.exitCode ?? 1;
  if (job.state === 'stopped') return 130;
  if (job.state === 'timed-out') return 124;
  return 1;
}

/** How long the CLI waits for the job's end to be recorded after its output ended. */
const END_WAIT_MS = 10_000;

interface RunFlags {
  release?: string;
  machine?: string;
  timeout?: string;
  interactive?: boolean;
}

export function addJobCommands(program: Command, client: (command: Command) => OrchestratorClient): void {
  program
    .command('run <name> <command...>')
    .description(
      "Run a command once in a container of the service's release (its image, env and volumes; no port, no route), print its output, and exit with its exit code; " +
        'Ctrl-C stops it. From a terminal, what you type goes to its stdin (line by line; Ctrl-D ends it); otherwise it reads an empty stdin unless -i. ' +
        "Put the command after --: platform run web -- sh -c 'echo $GREETING'.",
    )
    .option('--release <version>', 'the release to run (v3, or 3; default: the one the service runs)')
    .option('--machine <id>', 'the machine to run on (default: the planner picks one; a service with volumes runs it beside its instance 1)')
    .option('--timeout <duration>', 'stop it after this long: 90s, 10m, 1h30m (default 1h, at most 24h)')
    .option('-i, --interactive', "pass this stdin on to the command even when it is not a terminal (a pipe, a file), as docker run -i")
    .action(async (name: string, argv: string[], options: RunFlags, command: Command) => {
      const orchestrator = client(command);
      const stdin = options.interactive === true || process.stdin.isTTY === true;
      const job = await orchestrator.startJob(name, {
        command: argv,
        ...(options.release ? { release: options.release } : {}),
        ...(options.machine ? { machine: options.machine } : {}),
        ...(options.timeout ? { timeout: options.timeout } : {}),
        ...(stdin ? { stdin } : {}),
      });
      say(`job ${job.id} of ${name} v${job.release} on ${job.machine}`);
      const leaveStdin = stdin ? sendStdin(orchestrator, name, job.id) : undefined;
      process.exitCode = await followJob(orchestrator, name, job.id);
      leaveStdin?.();
    });

  program.command('jobs [name]').description('List jobs, newest first: one-off runs and release commands, how they ended, and who started them.').action(async (name: string | undefined, _o, command: Command) => {
    const jobs = await client(command).jobs(name);
    print(
      table(
        ['ID', 'SERVICE', 'KIND', 'RELEASE', 'MACHINE', 'STATE', 'EXIT', 'BY', 'CREATED', 'COMMAND'],
        jobs.map((job) => [job.id, job.service, job.kind, `v${job.release}`, job.machine, job.state, job.exitCode === undefined ? '-' : String(job.exitCode), job.caller ?? '-', job.createdAt, job.command?.join(' ') ?? '(the image\'s command)']),
      ),
    );
  });
}

/**
 * Passes this process's stdin on to the job's, as it comes (a terminal's line by line: it stays in
 * its cooked mode, so Ctrl-C is still the stop below and Ctrl-D ends the job's stdin). Returns how
 * to leave it once the job has ended.
 */
function sendStdin(orchestrator: OrchestratorClient, name: string, id: string): () => void {
  const leaving = new AbortController();
  orchestrator.sendJobStdin(name, id, process.stdin, leaving.signal).catch((error: Error) => {
    if (!leaving.signal.aborted) say(`stdin is not passed on to job ${id}: ${error.message}`);
  });
  return () => {
    leaving.abort();
    process.stdin.destroy();
  };
}

/**
 * Prints the job's output until it ends and returns the exit code for it. The first Ctrl-C asks
 * the platform to stop the job (its output goes on until it has stopped); a second one leaves at once.
 */
async function followJob(orchestrator: OrchestratorClient, name: string, id: string): Promise<number> {
  let stopping = false;
  const interrupt = () => {
    if (stopping) process.exit(130);
    stopping = true;
    say(`stopping job ${id} (Ctrl-C again to leave it)`);
    orchestrator.stopJob(name, id).catch((error: Error) => say(`could not stop job ${id}: ${error.message}`));
  };
  process.on('SIGINT', interrupt);
  try {
    const output = await orchestrator.jobOutput(name, id, { tail: 1000, follow: true });
    await pipeline(output, process.stdout, { end: false });
    const deadline = Date.now() + END_WAIT_MS;
    for (;;) {
      const job = await orchestrator.job(name, id);
      if (job.state !== 'pending' && job.state !== 'starting' && job.state !== 'running') {
        if (job.error) say(`job ${id} ${job.state}: ${job.error}`);
        return exitCodeOf(job);
      }
      if (Date.now() > deadline) {
        say(`job ${id} is still ${job.state}; its end was not recorded`);
        return 1;
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  } finally {
    process.off('SIGINT', interrupt);
  }
}
