import t from 'tap';
import { BackupFileError, decodeBackup, encodeBackup } from '../../src/backup/backup-file.js';
import { checkRecords } from '../../src/backup/record-schemas.js';
import { settleInFlight } from '../../src/backup/restore-backup.js';
import { BACKUP_FORMAT_VERSION } from '../../src/schemas/backup.js';
import { STORE_SCHEMA_VERSION } from '../../src/store/schema-version.js';
import type { Deployment } from '../../src/schemas/release.js';

// The backup file's format and the checks made of it before anything is restored.

const fields = { platformVersion: '0.1.0', revision: 42, createdAt: '2026-11-26T19:00:00.000Z' };
const entries = [
  { key: '/platform/directory/services/web', value: '{"name":"web"}' },
  { key: '/platform/session-key', value: 'line\nbreak "quoted" ünïcode' },
];

/** The text with the manifest line replaced by `change(manifest)`. */
function withManifest(text: string, change: (manifest: Record<string, unknown>) => Record<string, unknown>): string {
  const newline = text.indexOf('\n');
  return `${JSON.stringify(change(JSON.parse(text.slice(0, newline)) as Record<string, unknown>))}${text.slice(newline)}`;
}

t.test('a backup decodes to the entries and manifest it was made of', async (t) => {
  const { text, manifest } = encodeBackup(entries, fields);
  t.match(manifest, { ...fields, formatVersion: BACKUP_FORMAT_VERSION, schemaVersion: 0, keyCount: 2 }, 'entries without a schema record are schema 0');
  t.match(manifest.sha256, /^[0-9a-f]{64}$/);
  t.same(decodeBackup(text), { manifest, entries });
  t.same(decodeBackup(encodeBackup([], fields).text).entries, [], 'an empty backup too');
  const schemaRecord = { key: '/platform/meta/schema', value: JSON.stringify({ version: STORE_SCHEMA_VERSION, migratedAt: fields.createdAt, by: '0.2.0' }) };
  t.equal(encodeBackup([...entries, schemaRecord], fields).manifest.schemaVersion, STORE_SCHEMA_VERSION, "the manifest names the entries' own schema version");
});

t.test('a changed byte in an entry is refused naming both checksums', async (t) => {
  const { text, manifest } = encodeBackup(entries, fields);
  const damaged = text.replace('services/web', 'services/wob');
  t.throws(() => decodeBackup(damaged), new RegExp(`damaged: its entries hash to sha256 [0-9a-f]{64}, the manifest says ${manifest.sha256}`));
  t.throws(() => decodeBackup(text.slice(0, -5)), BackupFileError, 'a truncated file');
});

t.test('a newer format or store schema is refused naming both versions and the writer', async (t) => {
  const { text } = encodeBackup(entries, fields);
  const newerFormat = withManifest(text, (m) => ({ ...m, formatVersion: BACKUP_FORMAT_VERSION + 1, platformVersion: '9.0.0', extra: true }));
  t.throws(() => decodeBackup(newerFormat), {
    message:
      `the backup's format version ${BACKUP_FORMAT_VERSION + 1} (written by platform 9.0.0) ` +
      `is newer than this program's ${BACKUP_FORMAT_VERSION}: use that version or later`,
  });
  const newerSchema = withManifest(text, (m) => ({ ...m, schemaVersion: STORE_SCHEMA_VERSION + 1 }));
  const named = new RegExp(`store schema version ${STORE_SCHEMA_VERSION + 1} .* newer than this program's ${STORE_SCHEMA_VERSION}`);
  t.throws(() => decodeBackup(newerSchema), named);
});

t.test('files that are not backups, or whose manifest does not add up, are refused', async (t) => {
  const { text } = encodeBackup(entries, fields);
  t.throws(() => decodeBackup(''), /no manifest line/);
  t.throws(() => decodeBackup('{"format":"tarball"}\n'), /not a platform backup/);
  t.throws(() => decodeBackup(withManifest(text, (m) => ({ ...m, keyCount: 3 }))), /holds 2 keys, its manifest says 3/);
  t.throws(() => decodeBackup(withManifest(text, (m) => ({ ...m, revision: -1 }))), /manifest is invalid: \/revision must be >= 0/);
  t.throws(() => decodeBackup(encodeBackup([{ key: '/other/x', value: '' }], fields).text), /line 2: key \/other\/x is outside \/platform\//);
  t.throws(() => decodeBackup(encodeBackup([entries[0]!, entries[0]!], fields).text), /line 3: key \/platform\/directory\/services\/web appears twice/);
});

const deployment = (id: string, state: Deployment['state']): Deployment => ({
  id,
  service: 'web',
  release: 2,
  image: 'registry.local/web@sha256:' + '0'.repeat(64),
  state,
  trigger: 'manual',
  units: [],
  createdAt: '2026-11-26T18:00:00.000Z',
  updatedAt: '2026-11-26T18:00:00.000Z',
});

t.test('deployments in flight at backup time are settled as failed, finished ones kept byte for byte', async (t) => {
  const rolling = { key: '/platform/deployments/b', value: JSON.stringify(deployment('b', 'rolling')) };
  const done = { key: '/platform/deployments/a', value: JSON.stringify(deployment('a', 'succeeded')) };
  const now = new Date('2026-11-26T20:00:00.000Z');
  const result = settleInFlight([done, rolling, entries[0]!], 42, now);
  t.same(result.settled, ['b']);
  t.equal(result.entries[0], done);
  t.equal(result.entries[2], entries[0]);
  const reason = /in flight when the backup at revision 42 was taken/;
  t.match(JSON.parse(result.entries[1]!.value), { state: 'failed', finishedAt: now.toISOString(), reason });
});

t.test('records are checked against their family schema; the first bad one is named, families without one are counted', async (t) => {
  const token = { name: 'ci', role: 'deploy', createdAt: '2026-11-26T18:00:00.000Z', hash: 'a'.repeat(64) };
  const good = [
    { key: '/platform/tokens/ci', value: JSON.stringify(token) },
    { key: '/platform/tokens-issued', value: '2026-11-26T18:00:00.000Z' },
    { key: '/platform/acme/accounts/abc', value: '{}' },
    { key: '/platform/deployments/a', value: JSON.stringify(deployment('a', 'succeeded')) },
  ];
  const result = checkRecords(good);
  t.equal(result.checked, 3);
  t.same([...result.unchecked], [['/platform/acme', 1]]);
  t.equal(result.firstBad, undefined);

  const bad = [...good, { key: '/platform/tokens/root', value: JSON.stringify({ ...token, name: 'root', role: 'owner' }) }];
  t.match(checkRecords(bad).firstBad, { key: '/platform/tokens/root', family: 'tokens', reason: /\/role/ });
  const notJson = [{ key: '/platform/deployments/x', value: '{"id":' }];
  t.match(checkRecords(notJson).firstBad, { key: '/platform/deployments/x', reason: /^not JSON/ });
  const noHash = [{ key: '/platform/tokens/ci', value: JSON.stringify({ ...token, hash: undefined }) }];
  t.match(checkRecords(noHash).firstBad, { reason: /hash/ }, 'the secret part of a record is required too');
});

t.test('quotas and both forms of sign-out records are checked against their schemas', async (t) => {
  const good = [
    { key: '/platform/quotas/team-a-*', value: JSON.stringify({ services: 'team-a-*', units: 20, setAt: '2026-11-26T19:00:00.000Z' }) },
    { key: '/platform/ended-sessions/a', value: JSON.stringify({ token: 'ci', endsAt: '2026-11-27T07:00:00.000Z' }) },
    { key: '/platform/ended-sessions/b', value: '2026-11-27T07:00:00.000Z' },
  ];
  const result = checkRecords(good);
  t.equal(result.checked, 3);
  t.same([...result.unchecked], []);
  t.equal(result.firstBad, undefined);
  t.match(checkRecords([{ key: '/platform/ended-sessions/c', value: '{"endsAt":"soon"}' }]).firstBad, { family: 'ended sessions' });
  t.match(checkRecords([{ key: '/platform/quotas/x', value: '{"services":"x","units":-1,"setAt":"2026-11-26T19:00:00.000Z"}' }]).firstBad, { family: 'quotas' });
});

t.test('away records of machines expected back are checked against their schema', async (t) => {
  const away = { key: '/platform/machines-away/m1', value: JSON.stringify({ machine: 'm1', since: '2026-11-26T19:00:00.000Z', reason: 'the agent stopped' }) };
  t.same(checkRecords([away]), { checked: 1, unchecked: new Map() });
  t.match(checkRecords([{ ...away, value: '{"machine":"m1","since":"a while ago","reason":"x"}' }]).firstBad, { family: 'machines away', reason: /since/ });
});
