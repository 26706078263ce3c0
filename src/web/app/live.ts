import { pageRequest } from './api.js';
import type { ClusterState } from '../../client/cluster-state.js';
import type { Change, Deployment, JournalEntry, Machine, Service, Snapshot, Unit } from './model.js';

// The event stream (GET /events): a snapshot, then changes, applied to the cluster copy. The
// browser reconnects by itself after a dropped connection; after a refused one (a 503 while the
// orchestrator or the store is down) the stream is reopened here with backoff. Every connection
// starts with a fresh snapshot, so a reconnect needs no other refetch.

export type LinkState = 'connecting' | 'live' | 'reconnecting';

export function connectLive(state: ClusterState, changed: () => void, linkChanged: (link: LinkState) => void): void {
  let source: EventSource | undefined;
  let failures = 0;

  const handle = <T>(apply: (change: Change<T>) => void) => (event: Event) => {
    apply(JSON.parse((event as MessageEvent<string>).data) as Change<T>);
    changed();
  };

  const open = () => {
    source?.close();
    const current = new EventSource(pageRequest('GET /events').url);
    source = current;
    current.addEventListener('snapshot', (event) => {
      failures = 0;
      state.load(JSON.parse((event as MessageEvent<string>).data) as Snapshot);
      linkChanged('live');
      changed();
    });
    current.addEventListener('service', handle<Service>((change) => state.applyService(change)));
    current.addEventListener('unit', handle<Unit>((change) => state.applyUnit(change)));
    current.addEventListener('machine', handle<Machine>((change) => state.applyMachine(change)));
    current.addEventListener('deployment', handle<Deployment>((change) => state.applyDeployment(change)));
    current.addEventListener('journal', handle<JournalEntry>((change) => state.applyJournal(change)));
    current.addEventListener('error', () => {
      if (current !== source) return;
      linkChanged('reconnecting');
      if (current.readyState === EventSource.CLOSED) {
        failures += 1;
        setTimeout(open, Math.min(10_000, 500 * 2 ** Math.min(failures, 5)));
      }
    });
  };

  linkChanged('connecting');
  open();
}
