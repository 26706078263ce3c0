import t from 'tap';
import { JobOutput } from '../../src/roles/agent/job-output.js';
import { jobRules, placeJob } from '../../src/placement/job-placement.js';
import type { PlannerMachine, PlacedUnit, ServiceRules } from '../../src/placement/planner.js';
import { runsReleaseCommand } from '../../src/roles/scheduler/deploys/release-command.js';
import { exitCodeOf } from '../../src/client/job-commands.js';
import { jobDurationSeconds } from '../../src/schemas/job.js';
import type { Release } from '../../src/schemas/release.js';

// The pure parts of jobs (docs/jobs.md): the kept output, where a job is placed, which deploys run
// a release command, the CLI's exit code and the timeout's format.

t.test("a job's output keeps its last lines within both bounds and counts every line", async (t) => {
  const output = new JobOutput({ maxLines: 3, maxBytes: 1000 });
  output.push('one\ntw');
  t.same(output.lines(), ['one'], 'a line still being written waits for its end');
  output.push('o\r\nthree\nfour\nfive');
  t.same(output.lines(), ['two', 'three', 'four'], 'the last three complete lines, carriage returns dropped');
  output.end();
  t.same(output.lines(), ['three', 'four', 'five'], 'the last line without a newline is kept at the end');
  t.equal(output.lineCount(), 5);

  const small = new JobOutput({ maxLines: 100, maxBytes: 12 });
  small.push('aaaa\nbbbb\ncccc\n');
  t.same(small.lines(), ['bbbb', 'cccc'], 'older lines go when the bytes run out');
  const version = small.version;
  small.push('');
  t.equal(small.version, version, 'nothing new, no new version to write');
});

const machines = (count: number, more: Partial<PlannerMachine> = {}): PlannerMachine[] => Array.from({ length: count }, (_, i) => ({ id: `m${i + 1}`, capacity: 10, ...more }));
const rules = (service: string, more: Partial<ServiceRules> = {}): ServiceRules => ({ service, conflictsWith: '', hostPorts: [], ...more });
const units = (service: string, machine: string, count: number): PlacedUnit[] => Array.from({ length: count }, (_, i) => ({ service, instance: i + 1, machine }));

t.test('a job goes to the least used machine that has room, conflicting with nothing', async (t) => {
  // web conflicts with everything (*) and runs on m1 and m2: a job is no unit of any service, so it may go beside it.
  const placed = placeJob({ machines: machines(3), current: [...units('web', 'm1', 2), ...units('api', 'm2', 1), ...units('web', 'm3', 1)], rules: [rules('web', { conflictsWith: '*', hostPorts: [80] })], job: jobRules('web-run-1', undefined) });
  t.same(placed, { machine: 'm2' }, 'm2 and m3 hold one unit each; m2 comes first');
  const full = placeJob({ machines: machines(1, { capacity: 1 }), current: units('web', 'm1', 1), rules: [rules('web')], job: jobRules('web-run-1', undefined) });
  t.match(full, { refusal: /room|full/ }, 'a full cluster refuses it, saying why');
  const memory = placeJob({ machines: machines(2, { memoryMB: 512 }), current: [], rules: [], job: jobRules('db-run-1', { memoryMB: 1024 }) });
  t.match(memory, { refusal: /1024 MB|memory/ }, "the job reserves its release's memory");
});

t.test('a job that must run on one machine goes there or nowhere', async (t) => {
  t.same(placeJob({ machines: machines(2), current: units('db', 'm2', 1), rules: [], job: jobRules('db-run-1', undefined), required: 'm2' }), { machine: 'm2' });
  t.same(placeJob({ machines: machines(2), current: [], rules: [], job: jobRules('db-run-1', undefined), required: 'm9' }), { refusal: 'machine m9 is not registered' });
  t.same(placeJob({ machines: [{ id: 'm1', capacity: 10, unavailable: 'is being drained' }], current: [], rules: [], job: jobRules('db-run-1', undefined), required: 'm1' }), { refusal: 'machine m1 is being drained' });
});

const release = (more: Partial<Release> = {}, config: Partial<Release['config']> = {}): Release => ({
  service: 'db',
  version: 2,
  image: 'r/db@sha256:1',
  digest: 'sha256:1',
  config: { numInstances: 1, ports: [], env: {}, releaseCommand: ['migrate'], ...config },
  pushedAt: 0,
  deployment: 'd',
  createdAt: '',
  ...more,
});

t.test('a new release runs its command; a reschedule, a revert and a rollback do not, unless the rollback asks', async (t) => {
  t.ok(runsReleaseCommand(release(), { trigger: 'manual' }));
  t.ok(runsReleaseCommand(release(), { trigger: 'registry' }));
  t.notOk(runsReleaseCommand(release({}, { releaseCommand: undefined }), { trigger: 'manual' }), 'no command, nothing to run');
  t.notOk(runsReleaseCommand(release(), { trigger: 'reschedule' }));
  t.notOk(runsReleaseCommand(release(), { trigger: 'revert' }));
  t.notOk(runsReleaseCommand(release({ rollbackOf: 1 }), { trigger: 'rollback' }));
  t.ok(runsReleaseCommand(release({ rollbackOf: 1, runReleaseCommand: true }), { trigger: 'rollback' }));
});

t.test("the CLI exits with the job's code, 130 after a stop, 124 after a timeout", async (t) => {
  t.equal(exitCodeOf({ state: 'exited', exitCode: 7 }), 7);
  t.equal(exitCodeOf({ state: 'exited', exitCode: 0 }), 0);
  t.equal(exitCodeOf({ state: 'stopped', exitCode: 143 }), 130);
  t.equal(exitCodeOf({ state: 'timed-out', exitCode: 137 }), 124);
  t.equal(exitCodeOf({ state: 'failed' }), 1);
});

t.test('timeouts are durations of s, m and h up to 24h', async (t) => {
  t.equal(jobDurationSeconds('90s'), 90);
  t.equal(jobDurationSeconds('1h30m'), 5400);
  t.equal(jobDurationSeconds('24h'), 86_400);
  t.equal(jobDurationSeconds('25h'), undefined);
  t.equal(jobDurationSeconds('10x'), undefined);
  t.equal(jobDurationSeconds('0s'), undefined);
  t.equal(jobDurationSeconds(''), undefined);
});
