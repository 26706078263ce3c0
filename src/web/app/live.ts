import { pageRequest, sessionHeaders } from './api.js';
import type { ClusterState } from '../../client/cluster-state.js';
import type { Change, Deployment, JournalEntry, Machine, Service, Snapshot, Unit } from './model.js';
import { doublingDelayMs } from '../../doubling-delay.js';

// The event stream (GET /events): a snapshot, then changes, applied to the cluster copy. It is
// read with fetch rather than EventSource, which cannot send the session's proof header
// (src/web/app/api.ts). When the stream ends or is refused (a 503 while the orchestrator or the
// store is down) it is reopened with backoff. Every connection starts with a fresh snapshot, so a
// reconnect needs no other refetch.

export type LinkState = 'connecting' | 'live' | 'reconnecting';

type Dispatch = (event: string, data: string) => void;

/** Reads a text/event-stream body to its end, dispatching each event's name and data. */
async function readEvents(body: NonNullable<Response['body']>, dispatch: Dispatch): Promise<void> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let partial = '';
  let event = 'message';
  let data: string[] = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const lines = (partial + value).split('\n');
    partial = lines.pop()!;
    for (const raw of lines) {
      const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
      if (line === '') {
        if (data.length > 0) dispatch(event, data.join('\n'));
        event = 'message';
        data = [];
      } else if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
    }
  }
}

export function connectLive(state: ClusterState, changed: () => void, linkChanged: (link: LinkState) => void): void {
  let failures = 0;

  const appliers: Record<string, (data: string) => void> = {
    snapshot: (data) => {
      failures = 0;
      state.load(JSON.parse(data) as Snapshot);
      linkChanged('live');
    },
    service: (data) => state.applyService(JSON.parse(data) as Change<Service>),
    unit: (data) => state.applyUnit(JSON.parse(data) as Change<Unit>),
    machine: (data) => state.applyMachine(JSON.parse(data) as Change<Machine>),
    deployment: (data) => state.applyDeployment(JSON.parse(data) as Change<Deployment>),
    journal: (data) => state.applyJournal(JSON.parse(data) as Change<JournalEntry>),
  };
  const dispatch: Dispatch = (event, data) => {
    const apply = appliers[event];
    if (!apply) return;
    apply(data);
    changed();
  };

  const open = async (): Promise<void> => {
    try {
      const response = await fetch(pageRequest('GET /events').url, { headers: { ...sessionHeaders(), accept: 'text/event-stream' }, cache: 'no-store' });
      if (response.ok && response.body) await readEvents(response.body, dispatch);
    } catch {
      // A dropped or refused connection: reopened below, like an ended one.
    }
    linkChanged('reconnecting');
    failures += 1;
    setTimeout(() => void open(), doublingDelayMs(failures, 1_000, 10_000));
  };

  linkChanged('connecting');
  void open();
}
