// Every key the platform reads or writes, and nothing else builds keys by hand. Each family's key
// builders (the `…Key` exports) are imported only by its owner module, mostly in src/store/records/:
// src/store/record-owners.js says which, and the lint rule records/record-owner enforces it.
// Names that reach a key are validated first (service names and machine ids are DNS-label-like,
// unit names derive from them), so no request can write outside its own subtree.

export const ROOT = '/platform/';

/** Component announcements: `host:port` under a TTL lease. Fixed by the specification. */
export const componentPrefix = `${ROOT}services/`;
export const componentKey = (component: Component): string => `${componentPrefix}${component}`;

export type Component = 'service-directory' | 'scheduler' | 'orchestrator' | 'gateway' | 'web';
export const components: readonly Component[] = ['service-directory', 'scheduler', 'orchestrator', 'gateway', 'web'];

/** Service declarations owned by the directory: one JSON record per service. */
export const servicePrefix = `${ROOT}directory/services/`;
export const serviceKey = (service: string): string => `${servicePrefix}${service}`;

/** Immutable releases, numbered per service; zero-padded so key order is version order. */
export const releasesRoot = `${ROOT}releases/`;
export const releasePrefix = (service: string): string => `${releasesRoot}${service}/`;
export const releaseKey = (service: string, version: number): string =>
  `${releasePrefix(service)}${String(version).padStart(8, '0')}`;

/** Deployment records, by id (time-ordered ids, so key order is creation order). */
export const deploymentPrefix = `${ROOT}deployments/`;
export const deploymentKey = (id: string): string => `${deploymentPrefix}${id}`;

/** The journal of events, newest last in key order. */
export const journalPrefix = `${ROOT}journal/`;
export const journalKey = (id: string): string => `${journalPrefix}${id}`;

/** Machines registered by their agents under the agent's lease. */
export const machinePrefix = `${ROOT}machines/`;
export const machineKey = (machineId: string): string => `${machinePrefix}${machineId}`;

/**
 * Machines an operator is draining: no new unit is placed there and the units they run move to
 * other machines. Set and cleared by people (not leased), so a drain outlives agent restarts.
 */
export const machineDrainPrefix = `${ROOT}machine-drains/`;
export const machineDrainKey = (machineId: string): string => `${machineDrainPrefix}${machineId}`;

/**
 * Machines whose agent stopped on purpose (SIGTERM: a restart, a reboot) and that are expected
 * back: the scheduler keeps their units in place for its machine grace. Not leased, so the record
 * outlives the agent's lease (and an embedded store's restart); written when the agent stops and
 * deleted when it registers again, only through src/store/records/machines.ts.
 */
export const machineAwayPrefix = `${ROOT}machines-away/`;
export const machineAwayKey = (machineId: string): string => `${machineAwayPrefix}${machineId}`;

/**
 * Intent: the units the scheduler assigned to a machine, one key per slot (`<unit>@<spec>`, see
 * src/units.ts), so that during a rolling update the old and the new container of one unit can
 * be assigned at once. Written only by the scheduler, through src/store/records/assignments.ts.
 */
export const assignmentRoot = `${ROOT}assignments/`;
export const assignmentPrefix = (machineId: string): string => `${assignmentRoot}${machineId}/`;
export const assignmentKey = (machineId: string, slot: string): string => `${assignmentPrefix(machineId)}${slot}`;

/** Status: what an agent observes of its unit slots, under its machine lease. Written only by agents, through src/store/records/unit-statuses.ts. */
export const unitStatusRoot = `${ROOT}unit-status/`;
export const unitStatusPrefix = (machineId: string): string => `${unitStatusRoot}${machineId}/`;
export const unitStatusKey = (machineId: string, slot: string): string => `${unitStatusPrefix(machineId)}${slot}`;

/**
 * The last output of each unit instance's newest failed container, kept after the container is
 * gone; written by the unit's agent, deleted with the service (src/store/records/unit-outputs.ts).
 */
export const unitOutputRoot = `${ROOT}unit-output/`;
export const unitOutputPrefix = (service: string): string => `${unitOutputRoot}${service}/`;
export const unitOutputKey = (service: string, instance: number): string => `${unitOutputPrefix(service)}${instance}`;

/**
 * Handovers under way: while a service's key exists every gateway holds its new requests. Written
 * by the leading scheduler (fenced), through src/store/records/request-holds.ts; watched by gateways.
 */
export const requestHoldRoot = `${ROOT}request-holds/`;
export const requestHoldKey = (service: string): string => `${requestHoldRoot}${service}`;

/**
 * Jobs (docs/jobs.md): the job the leading scheduler placed on a machine (intent, by job id), and
 * what that machine's agent observed of its run (state, exit, the last lines of its output), kept
 * after its container is removed. Written only through src/store/records/jobs.ts.
 */
export const jobPrefix = `${ROOT}jobs/`;
export const jobKey = (id: string): string => `${jobPrefix}${id}`;
export const jobRunPrefix = `${ROOT}job-runs/`;
export const jobRunKey = (id: string): string => `${jobRunPrefix}${id}`;
/** A service's schedule as the leader handled it: the last tick, failures notified, skipped ticks. */
export const jobSchedulePrefix = `${ROOT}job-schedules/`;
export const jobScheduleKey = (service: string): string => `${jobSchedulePrefix}${service}`;

/** Scheduler leadership: held by the leading scheduler under its lease; its create revision fences every write. */
export const schedulerLeaderKey = `${ROOT}scheduler/leader`;

/** Work a follower scheduler hands to the leader, and the leader's replies, by request id. */
export const schedulerRequestPrefix = `${ROOT}scheduler/requests/`;
export const schedulerRequestKey = (id: string): string => `${schedulerRequestPrefix}${id}`;
export const schedulerReplyKey = (id: string): string => `${ROOT}scheduler/replies/${id}`;

/**
 * The store's layout version (`{version, migratedAt, by}`, src/schemas/store-schema.ts): absent in
 * stores made before 0.2.0, which are schema 0. Written only through src/store/store-schema.ts, by
 * the scheduler leader's migration.
 */
export const storeSchemaKey = `${ROOT}meta/schema`;

/**
 * What each running role is (`{role, address, machine, version, startedAt}`, src/schemas/component.ts),
 * one key per role and process under the process's announcement lease, so `platform version` can
 * list every running component. The announcements proper (componentKey) stay bare `host:port`.
 */
export const componentVersionPrefix = `${ROOT}components/`;
export const componentVersionKey = (role: string, instance: string): string => `${componentVersionPrefix}${role}/${instance}`;

/** The last segment of a key (a service name, unit name, machine id…). */
export const lastSegment = (key: string): string => key.slice(key.lastIndexOf('/') + 1);


/**
 * Registry webhook deliveries already handled, by hook kind and the SHA-256 (hex) of the event or
 * delivery id, under a lease of some hours: a repeated delivery is acknowledged and dropped.
 */
export const webhookDeliveryPrefix = `${ROOT}webhook-deliveries/`;
export const webhookDeliveryKey = (hook: string, idHash: string): string => `${webhookDeliveryPrefix}${hook}/${idHash}`;

/**
 * API tokens by name: the record holds the SHA-256 of the secret, never the secret. Written only
 * through src/auth/tokens.ts.
 */
export const tokenPrefix = `${ROOT}tokens/`;
export const tokenKey = (name: string): string => `${tokenPrefix}${name}`;

/** When a token was last used (ISO time), written at most once a minute per token and process. */
export const tokenUsePrefix = `${ROOT}token-use/`;
export const tokenUseKey = (name: string): string => `${tokenUsePrefix}${name}`;

/** Present once any token was issued: `platform token bootstrap` works only while it is absent. */
export const tokensIssuedKey = `${ROOT}tokens-issued`;

/**
 * The key that signs dashboard sessions (32 random bytes, base64url): made by the first process
 * that needs it and shared by every role, so a session cookie one orchestrator or web instance
 * signed is good at all of them. Written only through src/auth/session-key.ts.
 */
export const sessionKeyKey = `${ROOT}session-key`;

/**
 * Dashboard sessions that were signed out before they ended (value: `{token, endsAt}`, the
 * session's token and when it would have ended, ISO time; older records hold only the time), so a
 * copy of the cookie is refused. Written only through src/auth/ended-sessions.ts, which bounds
 * them and drops records whose session is over anyway.
 */
export const endedSessionPrefix = `${ROOT}ended-sessions/`;
export const endedSessionKey = (id: string): string => `${endedSessionPrefix}${id}`;

/**
 * Outbound notifications (docs/notifications.md). Endpoints are written only through
 * src/notifications/endpoints.ts (by the orchestrator, for admins); the outbox of events and the
 * deliveries made of them only through src/notifications/outbox.ts (by schedulers; deliveries by
 * the leader alone). A delivery is keyed by its event's id and its endpoint, so an event reaches
 * an endpoint once however many schedulers saw it.
 */
export const notifyEndpointPrefix = `${ROOT}notify/endpoints/`;
export const notifyEndpointKey = (id: string): string => `${notifyEndpointPrefix}${id}`;
export const notifyOutboxPrefix = `${ROOT}notify/outbox/`;
export const notifyOutboxKey = (eventId: string): string => `${notifyOutboxPrefix}${eventId}`;
export const notifyDeliveryPrefix = `${ROOT}notify/deliveries/`;
export const notifyDeliveryKey = (eventId: string, endpointId: string): string => `${notifyDeliveryPrefix}${eventId}/${endpointId}`;

/**
 * Private registry logins by registry host (`host[:port]`, validated first): the user name and the
 * password the scheduler resolves tags with and agents pull with. The password is kept as given,
 * since both must send it; it leaves the store only towards its registry. Written only through
 * src/auth/registry-credentials.ts.
 */
export const registryCredentialPrefix = `${ROOT}registry-credentials/`;
export const registryCredentialKey = (host: string): string => `${registryCredentialPrefix}${host}`;

/**
 * Quotas by the service glob they bound (`team-a-*`): the units, memory and CPUs the matching
 * services may reserve together. Written only through src/store/records/quotas.ts.
 */
export const quotaPrefix = `${ROOT}quotas/`;
export const quotaKey = (services: string): string => `${quotaPrefix}${services}`;

/**
 * TLS certificates the gateways serve, by host (`svc.example.com` or `*.example.com`): the chain,
 * its private key and where it came from. Written only through src/certificates/certificate-records.ts;
 * the private keys make this prefix as sensitive as the tokens (docs/gateway.md "HTTPS").
 */
export const certificatePrefix = `${ROOT}certificates/`;
export const certificateKey = (host: string): string => `${certificatePrefix}${host}`;

/** ACME state shared by every gateway (src/certificates/acme/): the account, challenges, order locks and order status. */
export const acmeAccountKey = (directoryHash: string): string => `${ROOT}acme/accounts/${directoryHash}`;
/** HTTP-01 key authorizations by token, leased to the ordering gateway: any gateway answers the challenge. */
export const acmeChallengePrefix = `${ROOT}acme/challenges/`;
export const acmeChallengeKey = (token: string): string => `${acmeChallengePrefix}${token}`;
/** The gateway ordering a host's certificate, under its lease: one order per host at a time. */
export const acmeLockPrefix = `${ROOT}acme/locks/`;
export const acmeLockKey = (host: string): string => `${acmeLockPrefix}${host}`;
/** How ordering a host's certificate last went (issued, failing with the server's reason, next attempt). */
export const acmeStatusPrefix = `${ROOT}acme/status/`;
export const acmeStatusKey = (host: string): string => `${acmeStatusPrefix}${host}`;
