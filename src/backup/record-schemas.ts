import { Type, type TSchema } from '@sinclair/typebox';
import type { ValidateFunction } from 'ajv';
import { buildAjv } from '../http/server.js';
import * as keys from '../store/keys.js';
import { Service } from '../schemas/service.js';
import { Deployment, JournalEntry, Release } from '../schemas/release.js';
import { Assignment, Machine, MachineAway, MachineDrain } from '../schemas/cluster.js';
import { Token } from '../schemas/token.js';
import { RegistryLogin } from '../schemas/registry.js';
import { Quota } from '../schemas/quota.js';
import { EndedSessionRecord } from '../schemas/session.js';
import { AcmeStatus, Certificate } from '../schemas/certificate.js';
import { NotificationEvent, NotifyDelivery, NotifyEndpoint } from '../schemas/notification.js';
import type { BackupEntry } from '../schemas/backup.js';
import { StoreSchemaRecord } from '../schemas/store-schema.js';
import { UnitOutput } from '../schemas/unit-output.js';
import { RequestHold } from '../schemas/request-hold.js';
import { Job, JobRun } from '../schemas/job.js';
import { ScheduleState } from '../schemas/schedule.js';
import { describeErrors } from './backup-file.js';

// Which schema each key family's records follow, so `platform backup verify` can check a backup
// record by record. Families whose record is the API's listing plus the secret it never shows
// (tokens, registry logins, certificates, notification endpoints) are checked as both. Families
// with no schema are counted as unchecked and named, never passed silently.

interface RecordFamily {
  name: string;
  /** A prefix (ends with "/") or one exact key. */
  key: string;
  /** JSON records are parsed first; text values are checked as the string they are; `json or text`: a family whose older records were text. */
  encoding: 'json' | 'text' | 'json or text';
  schema: TSchema;
}

const isoTime = Type.String({ format: 'date-time' });
const withSecrets = (listing: TSchema, secrets: string[]): TSchema =>
  Type.Intersect([listing, Type.Object(Object.fromEntries(secrets.map((name) => [name, Type.String()])))]);

const families: readonly RecordFamily[] = [
  { name: 'services', key: keys.servicePrefix, encoding: 'json', schema: Service },
  { name: 'releases', key: keys.releasesRoot, encoding: 'json', schema: Release },
  { name: 'deployments', key: keys.deploymentPrefix, encoding: 'json', schema: Deployment },
  { name: 'journal', key: keys.journalPrefix, encoding: 'json', schema: JournalEntry },
  { name: 'assignments', key: keys.assignmentRoot, encoding: 'json', schema: Assignment },
  { name: 'machine drains', key: keys.machineDrainPrefix, encoding: 'json', schema: MachineDrain },
  { name: 'machines', key: keys.machinePrefix, encoding: 'json', schema: Machine },
  { name: 'machines away', key: keys.machineAwayPrefix, encoding: 'json', schema: MachineAway },
  { name: 'tokens', key: keys.tokenPrefix, encoding: 'json', schema: withSecrets(Type.Omit(Token, ['lastUsedAt']), ['hash']) },
  { name: 'token use', key: keys.tokenUsePrefix, encoding: 'text', schema: isoTime },
  { name: 'tokens issued', key: keys.tokensIssuedKey, encoding: 'text', schema: isoTime },
  { name: 'session key', key: keys.sessionKeyKey, encoding: 'text', schema: Type.String({ pattern: '^[A-Za-z0-9_-]{43}$' }) },
  // Records made before sign-outs named their token hold only the time.
  { name: 'ended sessions', key: keys.endedSessionPrefix, encoding: 'json or text', schema: Type.Union([EndedSessionRecord, isoTime]) },
  { name: 'quotas', key: keys.quotaPrefix, encoding: 'json', schema: Quota },
  { name: 'jobs', key: keys.jobPrefix, encoding: 'json', schema: Job },
  { name: 'job runs', key: keys.jobRunPrefix, encoding: 'json', schema: JobRun },
  { name: 'job schedules', key: keys.jobSchedulePrefix, encoding: 'json', schema: ScheduleState },
  { name: 'unit outputs', key: keys.unitOutputRoot, encoding: 'json', schema: UnitOutput },
  { name: 'request holds', key: keys.requestHoldRoot, encoding: 'json', schema: RequestHold },
  { name: 'registry logins', key: keys.registryCredentialPrefix, encoding: 'json', schema: withSecrets(RegistryLogin, ['password']) },
  { name: 'certificates', key: keys.certificatePrefix, encoding: 'json', schema: withSecrets(Certificate, ['chain', 'key']) },
  { name: 'ACME status', key: keys.acmeStatusPrefix, encoding: 'json', schema: AcmeStatus },
  { name: 'notification endpoints', key: keys.notifyEndpointPrefix, encoding: 'json', schema: withSecrets(NotifyEndpoint, ['secret']) },
  { name: 'notification outbox', key: keys.notifyOutboxPrefix, encoding: 'json', schema: NotificationEvent },
  { name: 'store schema', key: keys.storeSchemaKey, encoding: 'json', schema: StoreSchemaRecord },
  { name: 'notification deliveries', key: keys.notifyDeliveryPrefix, encoding: 'json', schema: NotifyDelivery },
];

const familyOf = (key: string): RecordFamily | undefined =>
  families.find((family) => (family.key.endsWith('/') ? key.startsWith(family.key) : key === family.key));

export interface RecordCheck {
  checked: number;
  /** Keys no schema covers, by the key's first segment under /platform/ (an operator can look them up). */
  unchecked: Map<string, number>;
  /** The first record that fails its schema, and why. */
  firstBad?: { key: string; family: string; reason: string };
}

export function checkRecords(entries: readonly BackupEntry[]): RecordCheck {
  const validators = new Map<RecordFamily, ValidateFunction>();
  // One Ajv per family: the schemas carry $ids ("Token", "Service"…) that one instance would refuse twice.
  const validatorOf = (family: RecordFamily) => validators.get(family) ?? validators.set(family, buildAjv(false).compile(family.schema)).get(family)!;
  const result: RecordCheck = { checked: 0, unchecked: new Map() };
  for (const entry of entries) {
    const family = familyOf(entry.key);
    if (!family) {
      const group = `${keys.ROOT}${entry.key.slice(keys.ROOT.length).split('/')[0]}`;
      result.unchecked.set(group, (result.unchecked.get(group) ?? 0) + 1);
      continue;
    }
    const reason = recordProblem(entry.value, family, validatorOf(family));
    if (reason !== undefined) return { ...result, firstBad: { key: entry.key, family: family.name, reason } };
    result.checked += 1;
  }
  return result;
}

function recordProblem(value: string, family: RecordFamily, validate: ValidateFunction): string | undefined {
  let record: unknown = value;
  if (family.encoding === 'json' || (family.encoding === 'json or text' && value.startsWith('{'))) {
    try {
      record = JSON.parse(value);
    } catch (error) {
      return `not JSON: ${(error as Error).message}`;
    }
  }
  return validate(record) ? undefined : describeErrors(validate);
}
