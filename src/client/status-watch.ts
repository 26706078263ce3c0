import { followCluster } from './live-cluster.js';
import type { OrchestratorClient } from './orchestrator-client.js';
import { statusScreen } from './status-screen.js';

// `platform status [--watch]`: prints the screen from the first snapshot of GET /events, or (with
// --watch) redraws it on every change until Ctrl-C. Bursts of changes (a rollout writes several
// records at once) are drawn at most a few times a second.

const REDRAW_MS = 250;

export async function watchStatus(client: OrchestratorClient, watch: boolean, out: NodeJS.WriteStream = process.stdout): Promise<void> {
  const stop = new AbortController();
  const interrupt = () => stop.abort();
  process.once('SIGINT', interrupt);
  let pending: NodeJS.Timeout | undefined;
  const draw = (screen: string) => {
    // On a terminal the screen is redrawn in place; elsewhere each redraw follows the last.
    out.write(watch && out.isTTY ? `\x1b[H\x1b[2J${new Date().toISOString()}  (Ctrl-C to stop)\n\n${screen}` : watch ? `--- ${new Date().toISOString()}\n${screen}` : screen);
  };
  try {
    await followCluster(client, {
      signal: stop.signal,
      onReconnect: (why) => process.stderr.write(`platform: lost the event stream (${why}); reconnecting\n`),
      onUpdate: (state) => {
        if (!watch) {
          draw(statusScreen(state));
          return true;
        }
        pending ??= setTimeout(() => {
          pending = undefined;
          draw(statusScreen(state));
        }, REDRAW_MS);
        return false;
      },
    });
  } finally {
    clearTimeout(pending);
    process.off('SIGINT', interrupt);
  }
}
