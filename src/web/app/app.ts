import type { Changes, ClusterState } from './cluster-state.js';

/** What every view gets: the cluster copy, a way to ask for a render, and the stream's state. */
export interface App {
  readonly state: ClusterState;
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
