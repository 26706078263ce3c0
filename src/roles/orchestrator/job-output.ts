import { Readable } from 'node:stream';
import type { Store, Watch } from '../../store/store.js';
import { notFound } from '../../http/errors.js';
import { readJob, readJobRun, watchJobRun } from '../../store/records/jobs.js';
import { finishedJobStates, type JobRun } from '../../schemas/job.js';

// `GET /services/:name/jobs/:id/output`: a job's output as its agent keeps it in the job's run
// record (the last JOB_OUTPUT_LINES lines), as text. With `follow`, the record is watched and the
// lines printed since the last write are passed on as each write arrives, until the job ends: a
// quiet job costs no store reads, and a line shows as soon as the agent writes it (at most every
// 250 ms while the job runs, and once more with its end). `platform run` and `platform logs NAME
// --job ID -f` read it.

/** The job's kept output; 404 when the service has no such job. */
export async function jobOutput(store: Store, service: string, id: string, tail: number, follow: boolean, opened: () => void = () => undefined): Promise<Readable> {
  const job = await readJob(store, id);
  if (!job || job.service !== service) throw notFound(`service ${service} has no job ${id}`);
  if (follow) return followed(store, id, tail, opened);
  const lines = (await readJobRun(store, id))?.lines ?? [];
  return Readable.from([textOf(lines.slice(tail === 0 ? lines.length : -tail))]);
}

/**
 * The output from the last `tail` lines on, ending with the job. `opened` is called once the
 * reply's head is written: a quiet job must not leave the client without it.
 */
async function followed(store: Store, id: string, tail: number, opened: () => void): Promise<Readable> {
  let watch: Watch | undefined = undefined;
  let reading = false;
  const text = new Readable({
    // Read first once the reply has its head (type included): the head goes out then, the body may wait.
    read: () => void (reading || ((reading = true), opened())),
    destroy: (error, callback) => void (watch?.close() ?? Promise.resolve()).finally(() => callback(error)),
  });
  /** Lines of the run passed on (or skipped by `tail`); undefined until the record was first seen. */
  let sent: number | undefined;
  let newest = -1;
  const show = (run: JobRun | undefined, revision: number): void => {
    // The first read and the watch's first events may arrive in either order: older ones are spent.
    if (revision <= newest || text.destroyed || text.readableEnded) return;
    newest = revision;
    sent ??= Math.max(0, (run?.lineCount ?? 0) - tail);
    // Deleted (the job pruned): nothing more will come. Absent at the first read: not started yet.
    if (!run) return void (revision > 0 && text.push(null));
    const fresh = run.lineCount - sent;
    const kept = Math.min(fresh, run.lines.length);
    if (fresh > kept) text.push(`-- ${fresh - kept} lines not kept --\n`);
    if (kept > 0) text.push(textOf(run.lines.slice(-kept)));
    sent = Math.max(sent, run.lineCount);
    if (finishedJobStates.has(run.state)) text.push(null);
  };
  watch = await watchJobRun(store, id, show);
  if (text.destroyed) await watch.close();
  return text;
}

const textOf = (lines: string[]): string => (lines.length > 0 ? `${lines.join('\n')}\n` : '');
