// Who owns each record family: the one module allowed to import the family's key builders from
// src/store/keys.ts (the `…Key` exports; prefixes stay open to readers and watches). Read by the lint
// rule (eslint/record-owner-rule.js, wired in eslint.config.js) and by the test that checks the
// "written by" column of docs/architecture.md's Keys table against it
// (test/unit/record-owners.test.ts). Plain data in plain JavaScript, so ESLint loads it unbuilt.
//
// `keys` are the key patterns exactly as that table's first column spells them; `owners` are the
// modules its "written by" column names, and no others.

/** @type {readonly { family: string; keys: string[]; builders: string[]; owners: string[] }[]} */
export const recordFamilies = [
  { family: 'announcements', keys: ['/platform/services/<component>'], builders: ['componentKey'], owners: ['src/store/records/announcements.ts'] },
  { family: 'service declarations', keys: ['/platform/directory/services/<name>'], builders: ['serviceKey'], owners: ['src/store/records/services.ts'] },
  { family: 'releases', keys: ['/platform/releases/<service>/<version>'], builders: ['releaseKey'], owners: ['src/store/records/releases.ts'] },
  { family: 'deployments', keys: ['/platform/deployments/<id>'], builders: ['deploymentKey'], owners: ['src/store/records/deployments.ts'] },
  { family: 'journal', keys: ['/platform/journal/<id>'], builders: ['journalKey'], owners: ['src/store/records/journal.ts'] },
  {
    family: 'machines',
    keys: ['/platform/machines/<id>', '/platform/machines-away/<id>'],
    builders: ['machineKey', 'machineAwayKey'],
    owners: ['src/store/records/machines.ts'],
  },
  { family: 'machine drains', keys: ['/platform/machine-drains/<id>'], builders: ['machineDrainKey'], owners: ['src/store/records/machine-drains.ts'] },
  { family: 'assignments', keys: ['/platform/assignments/<machine>/<unit>@<spec>'], builders: ['assignmentKey'], owners: ['src/store/records/assignments.ts'] },
  { family: 'unit statuses', keys: ['/platform/unit-status/<machine>/<unit>@<spec>'], builders: ['unitStatusKey'], owners: ['src/store/records/unit-statuses.ts'] },
  { family: 'request holds', keys: ['/platform/request-holds/<service>'], builders: ['requestHoldKey'], owners: ['src/store/records/request-holds.ts'] },
  { family: 'unit outputs', keys: ['/platform/unit-output/<service>/<instance>'], builders: ['unitOutputKey'], owners: ['src/store/records/unit-outputs.ts'] },
  {
    family: 'jobs',
    keys: ['/platform/jobs/<id>', '/platform/job-runs/<id>', '/platform/job-schedules/<service>'],
    builders: ['jobKey', 'jobRunKey', 'jobScheduleKey'],
    owners: ['src/store/records/jobs.ts'],
  },
  { family: 'scheduler leadership', keys: ['/platform/scheduler/leader'], builders: ['schedulerLeaderKey'], owners: ['src/roles/scheduler/leadership.ts'] },
  {
    family: 'scheduler hand-offs',
    keys: ['/platform/scheduler/requests/<id>', '/platform/scheduler/replies/<id>'],
    builders: ['schedulerRequestKey', 'schedulerReplyKey'],
    owners: ['src/roles/scheduler/handoff.ts'],
  },
  {
    family: 'webhook deliveries',
    keys: ['/platform/webhook-deliveries/<hook>/<sha256 of id>'],
    builders: ['webhookDeliveryKey'],
    owners: ['src/roles/scheduler/webhooks/deliveries.ts'],
  },
  {
    family: 'tokens',
    keys: ['/platform/tokens/<name>', '/platform/token-use/<name>', '/platform/tokens-issued'],
    builders: ['tokenKey', 'tokenUseKey', 'tokensIssuedKey'],
    owners: ['src/auth/tokens.ts'],
  },
  { family: 'notification endpoints', keys: ['/platform/notify/endpoints/<id>'], builders: ['notifyEndpointKey'], owners: ['src/notifications/endpoints.ts'] },
  {
    family: 'notification outbox and deliveries',
    keys: ['/platform/notify/outbox/<event id>', '/platform/notify/deliveries/<event id>/<endpoint>'],
    builders: ['notifyOutboxKey', 'notifyDeliveryKey'],
    owners: ['src/notifications/outbox.ts'],
  },
  { family: 'registry logins', keys: ['/platform/registry-credentials/<host>'], builders: ['registryCredentialKey'], owners: ['src/auth/registry-credentials.ts'] },
  { family: 'quotas', keys: ['/platform/quotas/<glob>'], builders: ['quotaKey'], owners: ['src/store/records/quotas.ts'] },
  { family: 'session key', keys: ['/platform/session-key'], builders: ['sessionKeyKey'], owners: ['src/auth/session-key.ts'] },
  { family: 'ended sessions', keys: ['/platform/ended-sessions/<id>'], builders: ['endedSessionKey'], owners: ['src/auth/ended-sessions.ts'] },
  {
    family: 'certificates and ACME orders',
    keys: ['/platform/certificates/<host>', '/platform/acme/locks/<host>', '/platform/acme/status/<host>'],
    builders: ['certificateKey', 'acmeLockKey', 'acmeStatusKey'],
    owners: ['src/certificates/certificate-records.ts'],
  },
  { family: 'ACME accounts', keys: ['/platform/acme/accounts/<hash of directory>'], builders: ['acmeAccountKey'], owners: ['src/certificates/acme/acme-account.ts'] },
  { family: 'ACME challenges', keys: ['/platform/acme/challenges/<token>'], builders: ['acmeChallengeKey'], owners: ['src/certificates/acme/challenge-answers.ts'] },
  { family: 'store schema', keys: ['/platform/meta/schema'], builders: ['storeSchemaKey'], owners: ['src/store/store-schema.ts'] },
  { family: 'component versions', keys: ['/platform/components/<role>/<instance>'], builders: ['componentVersionKey'], owners: ['src/store/records/component-versions.ts'] },
];

/**
 * Modules that handle every family as stored, without writing any on its own account: a backup
 * checks each record against its family's schema, fixed keys (the session key, the store schema)
 * included. They may name any key.
 */
export const wholeStoreModules = ['src/backup/record-schemas.ts'];

/** The module every key is built in. */
export const keysModule = 'src/store/keys.ts';
