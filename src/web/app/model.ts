// The API's records as the dashboard reads them: the types of the server's TypeBox schemas
// (src/schemas/), imported for their types alone, so none of the server's code is loaded. The
// state words and what they mean come from src/schemas/states.ts, which the page does load.

export type { PortMapping, Service, ServiceConfig } from '../../schemas/service.js';
export type { Deployment, DeploymentState, JournalEntry, Release } from '../../schemas/release.js';
export type { ClusterUnit as Unit, Machine } from '../../schemas/cluster.js';
export type { Change, Snapshot } from '../../schemas/events.js';
export { isFinished, isRunning } from '../../schemas/states.js';
export type { SessionInfo } from '../../schemas/session.js';
