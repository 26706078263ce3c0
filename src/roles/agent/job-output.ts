import type { OutputBounds } from './last-output.js';

// The output of a running job as it is kept (src/store/records/jobs.ts): its text split into lines
// as it arrives, the last `maxLines` of them within `maxBytes`, and how many lines it printed in
// all. Pure: the job runner feeds it the container's stream and writes what it holds.

/** A line longer than this is kept by its end only (where the error usually is). */
const MAX_LINE_CHARS = 8192;

export class JobOutput {
  private readonly kept: string[] = [];
  private bytes = 0;
  private partial = '';
  private count = 0;
  /** Bumped on every change: the writer compares it with what it last wrote. */
  version = 0;

  constructor(private readonly bounds: OutputBounds) {}

  /** Text as it comes: complete lines are kept, a line still being written waits for its end. */
  push(text: string): void {
    const parts = (this.partial + text).split('\n');
    this.partial = parts.pop() ?? '';
    for (const line of parts) this.keep(line);
  }

  /** The stream ended: a last line without its newline is kept too. */
  end(): void {
    if (this.partial !== '') this.keep(this.partial);
    this.partial = '';
  }

  lines(): string[] {
    return [...this.kept];
  }

  lineCount(): number {
    return this.count;
  }

  private keep(raw: string): void {
    const line = (raw.endsWith('\r') ? raw.slice(0, -1) : raw).slice(-MAX_LINE_CHARS);
    this.kept.push(line);
    this.bytes += Buffer.byteLength(line) + 1;
    this.count += 1;
    this.version += 1;
    while (this.kept.length > this.bounds.maxLines || (this.bytes > this.bounds.maxBytes && this.kept.length > 1)) {
      this.bytes -= Buffer.byteLength(this.kept.shift()!) + 1;
    }
  }
}
