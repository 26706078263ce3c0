import t from 'tap';
import {
  LOST_RUN_GRACE_MS,
  newestTick,
  nextTick,
  runsGoing,
  scheduleProblem,
  scheduleStep,
  scheduledRunId,
  tickDecision,
  tickOfRunId,
  type ScheduleStepInput,
  type ScheduledRun,
} from '../../src/schedules/schedule-plan.js';
import { applyConfigPatch } from '../../src/roles/directory/config-patch.js';
import { unitsWanted } from '../../src/schemas/service.js';
import { jobFailedEvent } from '../../src/notifications/events.js';

// Scheduled jobs' pure part (issue 32 item 3): which tick is due, what a run is called, what the
// concurrency policy does, and how a schedule is validated.

const ms = (iso: string) => Date.parse(iso);
const iso = (time: number | undefined) => (time === undefined ? undefined : new Date(time).toISOString());
const everyMinute = { schedule: '* * * * *' };

t.test('a schedule is five cron fields in a zone that exists; the refusal names the field and the rule', async (t) => {
  t.equal(scheduleProblem({ schedule: '*/5 * * * *' }), undefined);
  t.equal(scheduleProblem({ schedule: '30 2 * * 1-5', timeZone: 'Europe/Paris' }), undefined);
  t.match(scheduleProblem({ schedule: '* * * *' }), /^schedule must be five cron fields .* got 4/);
  t.match(scheduleProblem({ schedule: '0 * * * * *' }), /^schedule must be five cron fields .* got 6/, 'six fields (seconds) are refused');
  t.match(scheduleProblem({ schedule: '61 * * * *' }), /^schedule "61 \* \* \* \*" is not a cron expression: .*59/);
  t.match(scheduleProblem({ schedule: '* * * * *', timeZone: 'Mars/Olympus_Mons' }), /^timeZone must be an IANA time zone .* got "Mars\/Olympus_Mons"/);
});

t.test('the config: schedule fields validated on patch, refused without a schedule, reset with null', async (t) => {
  const base = { numInstances: 1, ports: [], env: {} };
  const scheduled = applyConfigPatch(base, { schedule: '*/5 * * * *', timeZone: 'Asia/Tokyo', concurrency: 'replace', timeout: '10m', command: ['sh', '-c', 'date'] });
  t.match(scheduled, { schedule: '*/5 * * * *', timeZone: 'Asia/Tokyo', concurrency: 'replace', timeout: '10m', command: ['sh', '-c', 'date'] });
  t.throws(() => applyConfigPatch(base, { schedule: 'every minute' }), /schedule must be five cron fields/);
  t.throws(() => applyConfigPatch(base, { schedule: '* * * * *', timeZone: 'Nowhere/Else' }), /timeZone must be an IANA time zone/);
  t.throws(() => applyConfigPatch(base, { concurrency: 'forbid' }), /concurrency applies to a scheduled job only: set schedule too/);
  t.throws(() => applyConfigPatch(base, { schedule: '* * * * *', timeout: '25h' }), /timeout must be at most 24h/);
  t.throws(() => applyConfigPatch(scheduled, { schedule: null }), /timeZone applies to a scheduled job only/, 'removing the schedule alone leaves its fields orphaned');
  t.same(applyConfigPatch(scheduled, { schedule: null, timeZone: null, concurrency: null, timeout: null, command: null }), base);
});

t.test('a scheduled job runs no long-lived units', async (t) => {
  t.equal(unitsWanted({ numInstances: 3 }), 3);
  t.equal(unitsWanted({ numInstances: 3, schedule: '* * * * *' }), 0);
});

t.test('the newest tick in (after, now]: a tick at now counts, one at after does not', async (t) => {
  t.equal(iso(newestTick(everyMinute, ms('2026-11-29T15:29:00Z'), ms('2026-11-29T15:30:00Z'))), '2026-11-29T15:30:00.000Z');
  t.equal(iso(newestTick(everyMinute, ms('2026-11-29T15:30:00Z'), ms('2026-11-29T15:30:59.999Z'))), undefined);
  t.equal(iso(nextTick(everyMinute, ms('2026-11-29T15:30:00Z'))), '2026-11-29T15:31:00.000Z');
});

t.test('after an outage of many ticks, one catch-up run: the newest missed tick', async (t) => {
  const step = scheduleStep(input({ lastTickMs: ms('2026-11-29T09:00:00Z'), nowMs: ms('2026-11-29T15:30:20Z') }));
  t.equal(iso(step.due?.tickMs), '2026-11-29T15:30:00.000Z');
  t.equal(iso(step.nextTickMs), '2026-11-29T15:31:00.000Z');
  const again = scheduleStep(input({ lastTickMs: step.due!.tickMs, nowMs: ms('2026-11-29T15:30:40Z') }));
  t.equal(again.due, undefined, 'the tick handled is not run again');
  const hourly = scheduleStep(input({ spec: { schedule: '0 * * * *' }, lastTickMs: ms('2026-11-27T10:00:00Z'), nowMs: ms('2026-11-29T15:30:20Z') }));
  t.equal(iso(hourly.due?.tickMs), '2026-11-29T15:00:00.000Z', 'two days of hourly ticks missed: one run, of 15:00');
});

t.test('no tick before the release carrying the schedule was deployed is run', async (t) => {
  const deployedAt = ms('2026-11-29T15:30:30Z');
  t.equal(scheduleStep(input({ lastTickMs: undefined, sinceMs: deployedAt, nowMs: ms('2026-11-29T15:30:40Z') })).due, undefined);
  t.equal(iso(scheduleStep(input({ lastTickMs: undefined, sinceMs: deployedAt, nowMs: ms('2026-11-29T15:31:00.010Z') })).due?.tickMs), '2026-11-29T15:31:00.000Z');
  t.equal(iso(scheduleStep(input({ lastTickMs: undefined, sinceMs: ms('2026-11-29T15:31:00Z'), nowMs: ms('2026-11-29T15:31:00.010Z') })).due?.tickMs), '2026-11-29T15:31:00.000Z', 'a tick at the deploy instant is run');
});

t.test('DST in a zone: a time skipped in spring runs once, an hour later; one repeated in autumn runs once', async (t) => {
  const nightly = { schedule: '30 2 * * *', timeZone: 'America/New_York' };
  // 2026-03-08: 02:00 EST becomes 03:00 EDT, so 02:30 does not exist that night.
  t.equal(iso(nextTick(nightly, ms('2026-03-08T05:00:00Z'))), '2026-03-08T07:30:00.000Z', '03:30 EDT');
  t.equal(iso(nextTick(nightly, ms('2026-03-08T07:30:00Z'))), '2026-03-09T06:30:00.000Z', 'then 02:30 EDT the next night');
  // 2026-11-01: 02:00 EDT becomes 01:00 EST, so 01:30 happens twice; it runs at the first.
  const early = { schedule: '30 1 * * *', timeZone: 'America/New_York' };
  t.equal(iso(nextTick(early, ms('2026-11-01T04:00:00Z'))), '2026-11-01T05:30:00.000Z', '01:30 EDT');
  t.equal(iso(nextTick(early, ms('2026-11-01T05:30:00Z'))), '2026-11-02T06:30:00.000Z', 'not again at 01:30 EST');
  const catchUp = scheduleStep(input({ spec: early, lastTickMs: ms('2026-10-30T05:30:00Z'), nowMs: ms('2026-11-01T07:00:00Z') }));
  t.equal(iso(catchUp.due?.tickMs), '2026-11-01T05:30:00.000Z', 'the newest missed tick, read in the zone');
  const atRepeat = scheduleStep(input({ spec: early, lastTickMs: ms('2026-11-01T05:30:00Z'), nowMs: ms('2026-11-01T06:30:20Z') }));
  t.equal(atRepeat.due, undefined, 'looked at again at 01:30 EST: no second run');
  const hourly = { schedule: '0 * * * *', timeZone: 'America/New_York' };
  const repeatedHour = scheduleStep(input({ spec: hourly, lastTickMs: ms('2026-11-01T05:00:00Z'), nowMs: ms('2026-11-01T06:00:10Z') }));
  t.equal(iso(repeatedHour.due?.tickMs), '2026-11-01T06:00:00.000Z', 'an hourly schedule runs in both 01:00s: an hour of real time apart');
});

t.test('a run id follows from the service and the tick: the same for every scheduler, apart for two services', async (t) => {
  const tick = ms('2026-11-29T15:30:00Z');
  t.equal(scheduledRunId('report', tick), scheduledRunId('report', tick));
  t.not(scheduledRunId('report', tick), scheduledRunId('backup', tick));
  t.not(scheduledRunId('report', tick), scheduledRunId('report', tick + 60_000));
  t.match(scheduledRunId('report', tick), /^cron-202611291530-[0-9a-f]{8}$/);
  t.equal(tickOfRunId(scheduledRunId('report', tick)), tick);
  t.equal(tickOfRunId('0193a0b1c2d3-abcd'), undefined, 'a one-off job id names no tick');
  t.equal(scheduleStep(input({ nowMs: tick + 10 })).due?.runId, scheduledRunId('report', tick));
});

t.test('concurrency: forbid skips while a run goes on, allow starts another, replace stops it', async (t) => {
  const going = [run('cron-a', false, '2026-11-29T15:29:00Z')];
  t.same(tickDecision('forbid', []), { start: true, stop: [] });
  t.same(tickDecision('forbid', going), { start: false, skipped: 'concurrency forbid: run cron-a still going' });
  t.same(tickDecision('allow', going), { start: true, stop: [] });
  t.same(tickDecision('replace', going), { start: true, stop: ['cron-a'] });
  const step = scheduleStep(input({ policy: 'forbid', runs: going, nowMs: ms('2026-11-29T15:30:00.050Z') }));
  t.same(step.due?.decision, { start: false, skipped: 'concurrency forbid: run cron-a still going' });
});

t.test('a finished run, or one long past its timeout that never reported an end, is not going', async (t) => {
  const now = ms('2026-11-29T15:30:00Z');
  const runs = [run('done', true, '2026-11-29T15:29:00Z'), run('going', false, '2026-11-29T15:29:00Z'), run('lost', false, '2026-11-29T15:00:00Z', 60)];
  t.same(runsGoing(runs, now).map((r) => r.id), ['going']);
  t.same(runsGoing([run('late', false, '2026-11-29T15:28:00Z', 60)], ms('2026-11-29T15:29:00Z') + LOST_RUN_GRACE_MS - 1).length, 1, 'within the grace after its timeout it still counts');
  const ownRun = scheduleStep(input({ policy: 'forbid', runs: [run(scheduledRunId('report', ms('2026-11-29T15:30:00Z')), false, '2026-11-29T15:30:00Z')], nowMs: now + 500 }));
  t.same(ownRun.due?.decision, { start: true, stop: [] }, "the tick's own run (started by a leader that died before recording) does not forbid it");
});

t.test('a failed run is one event whose id follows from the run', async (t) => {
  const failure = { service: 'report', run: 'cron-202611291530-abcdef01', tick: '2026-11-29T15:30:00.000Z', release: 2, reason: 'exited with code 3', exitCode: 3, at: '2026-11-29T15:30:05Z' };
  const event = jobFailedEvent(failure);
  t.match(event, { event: 'job.failed', service: 'report', details: { job: failure.run, exitCode: 3, reason: 'exited with code 3' } });
  t.equal(jobFailedEvent({ ...failure, at: '2026-11-29T15:40:00Z' }).id, event.id, 'seen again later: the same id');
  t.not(jobFailedEvent({ ...failure, run: 'cron-202611291531-abcdef01' }).id, event.id);
});

function input(overrides: Partial<ScheduleStepInput>): ScheduleStepInput {
  return { service: 'report', spec: everyMinute, policy: 'forbid', lastTickMs: ms('2026-11-29T15:29:00Z'), sinceMs: 0, runs: [], nowMs: ms('2026-11-29T15:30:00.020Z'), ...overrides };
}

function run(id: string, finished: boolean, createdAt: string, timeoutSeconds = 3600): ScheduledRun {
  return { id, finished, createdAt, timeoutSeconds };
}
