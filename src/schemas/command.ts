import { Type } from '@sinclair/typebox';

// What a job runs and for how long: shared by a service's config (`releaseCommand`,
// `releaseCommandTimeout`) and `POST /services/:name/jobs`, apart from job.ts so that the service
// schemas need not import the job's. Durations are typed as people type them (`90s`, `10m`,
// `1h30m`), as the CLI's --timeout is.

/** A command: the argv of the container's process (no shell unless it names one). */
export const Command = Type.Array(Type.String({ maxLength: 4096, description: 'an argument of at most 4096 characters' }), {
  minItems: 1,
  maxItems: 256,
  description: 'an argv array of 1 to 256 strings, each at most 4096 characters, such as ["sh", "-c", "echo hi"]',
});

export const JOB_DURATION = '^([1-9][0-9]{0,5}[smh])+$';
export const JobDuration = Type.String({ pattern: JOB_DURATION, description: 'a duration such as 90s, 10m or 1h30m (s, m, h), at most 24h' });

/** The longest a job may run: a longer one is a service, not a job. */
export const MAX_JOB_SECONDS = 86_400;
/** How long a `platform run` job may run when no --timeout is given. */
export const DEFAULT_JOB_SECONDS = 3600;
/** How long a release command may run when `releaseCommandTimeout` is not set (issue 32: 10 min). */
export const DEFAULT_RELEASE_COMMAND_SECONDS = 600;

const unitSeconds: Record<string, number> = { s: 1, m: 60, h: 3600 };

/** A JobDuration in seconds, or undefined when it is not one or is longer than MAX_JOB_SECONDS. */
export function jobDurationSeconds(text: string): number | undefined {
  if (!new RegExp(JOB_DURATION).test(text)) return undefined;
  let total = 0;
  for (const [, amount, unit] of text.matchAll(/(\d+)([smh])/g)) total += Number(amount) * unitSeconds[unit!]!;
  return total <= MAX_JOB_SECONDS ? total : undefined;
}

