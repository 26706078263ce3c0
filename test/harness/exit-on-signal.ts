import { constants } from 'node:os';

// A test process stopped by a signal (tap's timeout, ^C) must clean up like one that ends: every
// harness module removes what it made in an 'exit' handler, and a signal's default action skips
// those. On SIGINT, SIGTERM or SIGHUP the process exits instead, with the code a shell reports
// for that signal, so the handlers run.

let installed = false;

export function exitOnSignals(): void {
  if (installed) return;
  installed = true;
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => process.exit(128 + constants.signals[signal]));
  }
}
