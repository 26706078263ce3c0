import { Type, type Static } from '@sinclair/typebox';

// The fields that make a service a scheduled job (docs/jobs.md "Scheduled jobs"), written once for
// the config's schema and its merge patch. What the schema cannot say (that a cron expression
// parses, that a time zone exists) is checked by src/schedules/schedule-plan.ts.

export const concurrencyPolicies = ['forbid', 'allow', 'replace'] as const;
export type ConcurrencyPolicy = (typeof concurrencyPolicies)[number];

export const scheduleFields = {
  schedule: Type.String({
    minLength: 9,
    maxLength: 200,
    description: 'a five-field cron expression (minute hour day-of-month month day-of-week), such as "*/15 * * * *" or "30 2 * * 1-5"',
  }),
  timeZone: Type.String({ minLength: 1, maxLength: 64, description: 'an IANA time zone the schedule is read in, such as Europe/Paris (default UTC)' }),
  concurrency: Type.Unsafe<ConcurrencyPolicy>({
    type: 'string',
    enum: [...concurrencyPolicies],
    description: '"forbid" (the default: a tick is skipped while a run is still going), "allow" (runs overlap) or "replace" (the running one is stopped)',
  }),
};

/**
 * The leader's bookkeeping of one service's schedule: the last tick it handled (ran, skipped or
 * failed to place), the runs whose failure it has notified, and the newest skipped ticks.
 */
export const ScheduleState = Type.Object({
  service: Type.String(),
  lastTick: Type.String(),
  notified: Type.Array(Type.String()),
  skipped: Type.Array(Type.Object({ tick: Type.String(), reason: Type.String() })),
  updatedAt: Type.String(),
});
export type ScheduleState = Static<typeof ScheduleState>;
