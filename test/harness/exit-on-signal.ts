import { constants } from 'node:os';

// A test process stopped by a signal (tap's timeout, ^C) must clean up like one that ends: every
// harness module removes what it made in an 'exit' handler, and a signal's default action skips
// those. On SIGINT, SIGTERM or SIGHUP the process exits instead, with the code a shell reports
// for that signal, so the handlers run. At a file's timeout tap reports it timed out, then sends
// SIGALRM, then SIGKILL half a second later (@tapjs/core spawn.js): on SIGALRM the process exits
// at once, so the handlers run before the SIGKILL: a timed-out upgrade.test in CI left etcd, two engines, HAProxy and eight
// roles running, which later tests found on their ports.

let installed = false;

export function exitOnSignals(): void {
  if (installed) return;
  installed = true;
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => process.exit(128 + constants.signals[signal]));
  }
  // Kept installed after the first SIGALRM, not once: tap raises SIGALRM in the process itself on
  // its timeout message, and its parent sends another 500 ms after that message. A second one
  // finding no listener of ours is re-raised by tap's signal-exit with its default action, which
  // ends the process before the timer below, skipping every 'exit' handler (seen under load).
  let alarmed = false;
  process.on('SIGALRM', () => {
    if (alarmed) return;
    alarmed = true;
    setTimeout(() => process.exit(128 + constants.signals.SIGALRM), ALARM_REPORT_MS);
  });
}

/** Time left for the report of tap's own SIGALRM handler to be written out (tap's SIGKILL follows 500 ms after the signal). */
const ALARM_REPORT_MS = 100;
