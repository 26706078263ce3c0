import t from 'tap';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { importRootfs } from '../harness/rootfs.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { readUnitOutput } from '../../src/store/records/unit-outputs.js';
import { keepFailedOutput } from '../../src/roles/agent/failed-output.js';
import { inspectExit } from '../../src/roles/agent/containers.js';
import { unitLogConfig } from '../../src/roles/agent/container-spec.js';
import { defaultUnitLogs } from '../../src/config.js';
import type { Assignment } from '../../src/schemas/cluster.js';

// Issue 31: the last line of a failed unit's output was once missing from `--previous`. The path
// from a container's exit to its kept record, on a real engine, many times and several at once (as
// a loaded CI machine runs it): a program that writes many lines fast and its last one without a
// newline, then exits 3; the agent's steps once the engine reports the exit (inspect, read the
// output, keep it); each kept record must end with that last line, whole, after the one before it.

const etcd = await startEtcd();
const engine = await startDockerd();
const store = new EtcdStore([etcd.url]);
t.teardown(async () => {
  await store.close();
  await engine.stop();
  await etcd.stop();
});

const LINES = 3_000;
const CONTAINERS = 6;
/** Each container fails this many times, started again in place as the agent does: its log file runs on from run to run. */
const RUNS = 8;
const repo = `failed-output-${randomBytes(3).toString('hex')}`;
// Each run counts itself in /tmp/run (the container's file system outlives a restart in place).
const countRun = 'n=$(cat /tmp/run 2>/dev/null || echo 0); n=$((n+1)); echo $n > /tmp/run; ';
// awk's output is block-buffered into a pipe: its last block goes out as it exits. The shell's echo
// writes each line itself, the last one just before the exit.
const programs = {
  awk: countRun + `exec awk -v run=$n 'BEGIN { for (i = 1; i <= ${LINES}; i++) print "line " i; printf "last words of run %s", run; exit 3 }'`,
  shell: countRun + `i=1; while [ $i -le ${LINES} ]; do echo "line $i"; i=$((i+1)); done; echo -n "last words of run $n"; exit 3`,
};
await importRootfs(engine.docker, { applets: ['sh', 'awk', 'echo', 'cat'] }, { repo, tag: 'v1', changes: ['ENV PATH=/bin'] });

/** A container failing RUNS times, each run waited for as the agent is told (the engine reports the exit), its output kept and read back. */
async function failingContainer(instance: number, program: keyof typeof programs, missed: string[]): Promise<void> {
  const service = `crash-${program}`;
  const assignment = { service, instance, unit: `${service}-${instance}.service`, deployment: 'd1', release: 1, image: `${repo}:v1` } as Assignment;
  const container = await engine.docker.createContainer({
    Image: `${repo}:v1`,
    Cmd: ['sh', '-c', programs[program]],
    HostConfig: { LogConfig: unitLogConfig(defaultUnitLogs), NetworkMode: 'none' },
  });
  try {
    for (let run = 1; run <= RUNS; run++) {
      await container.start();
      await container.wait();
      await keepFailedOutput(engine.docker, store, 'm1', assignment, container.id, await inspectExit(engine.docker, container.id));
      const lines = (await readUnitOutput(store, service, instance))?.lines ?? [];
      const [beforeLast, last] = [lines.at(-2) ?? '', lines.at(-1) ?? ''];
      if (!last.endsWith(` last words of run ${run}`) || !beforeLast.endsWith(` line ${LINES}`)) missed.push(`${assignment.unit} run ${run} ended ${JSON.stringify(lines.slice(-2))}`);
    }
  } finally {
    await container.remove({ force: true });
  }
}

t.test(`a failed run's last line is kept, whole, though it has no newline and comes at the exit (${CONTAINERS} containers at once, ${RUNS} runs each)`, async (t) => {
  const missed: string[] = [];
  await Promise.all(Array.from({ length: CONTAINERS }, (_, i) => failingContainer(i + 1, i % 2 === 0 ? 'awk' : 'shell', missed)));
  // What the engine said meanwhile: it drops a container's unread output when copying it takes longer than its own timeouts.
  const warnings = readFileSync(join(dirname(engine.socket), 'dockerd.log'), 'utf8').split('\n').filter((line) => /level=(warn|error)/.test(line));
  t.same(missed, [], `every run ends with its last words after its last numbered line (the engine's warnings: ${JSON.stringify(warnings.slice(-5))})`);
});
