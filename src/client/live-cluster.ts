import { setTimeout as sleep } from 'node:timers/promises';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { ApiError, type OrchestratorClient } from './orchestrator-client.js';
import { ClusterState } from './cluster-state.js';
import type { Change, Snapshot } from '../schemas/events.js';
import { doublingDelayMs } from '../doubling-delay.js';

// The CLI's live copy of the cluster, fed by the orchestrator's event stream (GET /events) the way
// the dashboard's is: the same ClusterState, a snapshot on every connection and one record per
// event after it. Commands that follow something (a deployment, `status --watch`) read this copy
// instead of polling the API. A dropped or refused stream (the orchestrator restarting, a 503
// while the store is away) is opened again with backoff; a 4xx (no or a wrong token) is final.

/** The events of an SSE body, as they are complete. */
export async function* serverSentEvents(body: AsyncIterable<Buffer | string>): AsyncGenerator<EventSourceMessage> {
  const complete: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (event) => complete.push(event) });
  const decoder = new TextDecoder();
  for await (const chunk of body) {
    parser.feed(typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true }));
    yield* complete.splice(0);
  }
}

/** Applies one event of the stream to the copy; false for an event of a kind it does not know. */
export function applyEvent(state: ClusterState, event: EventSourceMessage): boolean {
  const data: unknown = JSON.parse(event.data);
  switch (event.event) {
    case 'snapshot':
      state.load(data as Snapshot);
      return true;
    case 'service':
      state.applyService(data as Change<never>);
      return true;
    case 'unit':
      state.applyUnit(data as Change<never>);
      return true;
    case 'machine':
      state.applyMachine(data as Change<never>);
      return true;
    case 'deployment':
      state.applyDeployment(data as Change<never>);
      return true;
    case 'journal':
      state.applyJournal(data as Change<never>);
      return true;
    default:
      return false;
  }
}

export interface LiveOptions {
  /** Called after every snapshot and change; return true to stop following. */
  onUpdate: (state: ClusterState) => boolean | void | Promise<boolean | void>;
  /** Called when the stream dropped and is being opened again (with why). */
  onReconnect?: (why: string) => void;
  signal: AbortSignal;
}

/** Follows the cluster until `onUpdate` says done or `signal` aborts; throws on a refusal (4xx). */
export async function followCluster(client: OrchestratorClient, options: LiveOptions): Promise<ClusterState> {
  const state = new ClusterState();
  let failures = 0;
  while (!options.signal.aborted) {
    try {
      const body = await client.events(options.signal);
      for await (const event of serverSentEvents(body)) {
        if (!applyEvent(state, event)) continue;
        failures = 0;
        if (await options.onUpdate(state)) {
          body.destroy();
          return state;
        }
      }
      options.onReconnect?.('the event stream ended');
    } catch (error) {
      if (options.signal.aborted) break;
      if (error instanceof ApiError && error.status < 500) throw error;
      options.onReconnect?.((error as Error).message);
    }
    failures += 1;
    await sleep(doublingDelayMs(failures, 500, 5_000), undefined, { signal: options.signal }).catch(() => undefined);
  }
  return state;
}
