import { Readable } from 'node:stream';
import type { Store } from '../../store/store.js';
import { notFound } from '../../http/errors.js';
import { readJob, readJobRun } from '../../store/records/jobs.js';
import { finishedJobStates, type JobRun } from '../../schemas/job.js';

// `GET /services/:name/jobs/:id/output`: a job's output as its agent keeps it in the job's run
// record (the last JOB_OUTPUT_LINES lines), as text. With `follow`, the record is read again every
// POLL_MS and the lines printed since are passed on, until the job ends (the agent writes its
// record at most every 250 ms while it runs, and once more with its end). `platform run` and
// `platform logs NAME --job ID -f` read it.

const POLL_MS = 250;

/** The job's kept output; 404 when the service has no such job. */
export async function jobOutput(store: Store, service: string, id: string, tail: number, follow: boolean, opened: () => void = () => undefined): Promise<Readable> {
  const job = await readJob(store, id);
  if (!job || job.service !== service) throw notFound(`service ${service} has no job ${id}`);
  const first = await readJobRun(store, id);
  if (!follow) return Readable.from([textOf((first?.lines ?? []).slice(tail === 0 ? (first?.lines.length ?? 0) : -tail))]);
  return Readable.from(followed(store, id, first, tail, opened));
}

/** `opened` is called once the reply's head is written: a quiet job must not leave the client without it. */
async function* followed(store: Store, id: string, first: JobRun | undefined, tail: number, opened: () => void): AsyncGenerator<string> {
  opened();
  let run = first;
  let sent = Math.max(0, (run?.lineCount ?? 0) - tail);
  for (;;) {
    if (run) {
      const fresh = run.lineCount - sent;
      const kept = Math.min(fresh, run.lines.length);
      if (fresh > kept) yield `-- ${fresh - kept} lines not kept --\n`;
      if (kept > 0) yield textOf(run.lines.slice(-kept));
      sent = run.lineCount;
      if (finishedJobStates.has(run.state)) return;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    run = await readJobRun(store, id);
  }
}

const textOf = (lines: string[]): string => (lines.length > 0 ? `${lines.join('\n')}\n` : '');
