import type { Readable, Writable } from 'node:stream';
import { conflict } from '../../http/errors.js';

// The stdin of this machine's jobs that keep one open (`platform run` from a terminal, or `-i`):
// the container's attached stream, handed to the one caller the orchestrator passes on. The call
// may come before the container is attached (its image still being pulled): it waits for it, or
// for the job's end.

interface Waiter {
  resolve: (stdin: Writable) => void;
  reject: (error: Error) => void;
}

export class JobStdins {
  private readonly attached = new Map<string, Writable>();
  private readonly waiting = new Map<string, Waiter>();
  private readonly taken = new Set<string>();
  private readonly ended = new Set<string>();

  /** The job's container is attached: its stdin goes to the caller, who may be waiting. */
  attach(id: string, stdin: Writable): void {
    this.attached.set(id, stdin);
    this.waiting.get(id)?.resolve(stdin);
    this.waiting.delete(id);
  }

  /** The job has ended: nothing more can be written, and a caller still waiting is told so. */
  end(id: string): void {
    this.attached.delete(id);
    this.ended.add(id);
    this.waiting.get(id)?.reject(conflict(`job ${id} has ended`));
    this.waiting.delete(id);
  }

  /** Forgets a job whose record is gone. */
  forget(id: string): void {
    this.ended.delete(id);
    this.taken.delete(id);
  }

  /** The job's stdin, once: a second caller is refused (two writers would interleave their bytes). */
  take(id: string): Promise<Writable> {
    if (this.ended.has(id)) return Promise.reject(conflict(`job ${id} has ended`));
    if (this.taken.has(id)) return Promise.reject(conflict(`the stdin of job ${id} is attached already`));
    this.taken.add(id);
    const stdin = this.attached.get(id);
    if (stdin) return Promise.resolve(stdin);
    return new Promise((resolve, reject) => this.waiting.set(id, { resolve, reject }));
  }
}

/**
 * Passes `input` on to the job's stdin and closes it (the command reads its end) when the input
 * ends or its caller goes. The stdin is the half of the container's attached connection that
 * also carries its output: it is ended, never destroyed.
 */
export function feedStdin(input: Readable, stdin: Writable): Promise<void> {
  return new Promise((resolve) => {
    const close = () => {
      input.unpipe(stdin);
      if (!stdin.writableEnded && !stdin.destroyed) stdin.end();
      resolve();
    };
    input.pipe(stdin, { end: false });
    input.once('end', close).once('close', close).once('error', close);
    stdin.once('close', close).once('error', close);
  });
}
