import type { Changes, ClusterState } from '../../client/cluster-state.js';
import type { SessionInfo } from './model.js';
import type { Need } from './permissions.js';

/** What every view gets: the cluster copy, a way to ask for a render, the stream's state, and who the page acts as. */
export interface App {
  readonly state: ClusterState;
  readonly session: SessionInfo;
  /** Why the page's caller may not do what needs `need` (on `service`); undefined when it may. */
  refusal(need: Need, service?: string): string | undefined;
  requestRender(): void;
  isLive(): boolean;
  navigate(hash: string): void;
}

export interface View {
  readonly element: HTMLElement;
  readonly title: string;
  update(changes: Changes): void;
  dispose?(): void;
}
