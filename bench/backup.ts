import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd } from '../test/harness/etcd.js';
import { EtcdStore } from '../src/store/etcd-store.js';
import { EmbeddedStore } from '../src/store/embedded-store.js';
import type { Store } from '../src/store/store.js';
import { deploymentKey, journalKey, releaseKey, serviceKey } from '../src/store/keys.js';
import { takeBackup, writePrivateFile } from '../src/backup/take-backup.js';
import { verifyBackup } from '../src/backup/verify-backup.js';
import { restoreBackup } from '../src/backup/restore-backup.js';
import { decodeBackup } from '../src/backup/backup-file.js';
import { formatBytes } from '../src/backup/backup-file.js';
import { backupToDirectory } from '../src/backup/backup-directory.js';
import type { Service } from '../src/schemas/service.js';
import type { Deployment, JournalEntry, Release } from '../src/schemas/release.js';
import { countArgument, loadAverage, ms, printTable, type BenchRow } from './table.js';

// Issue 28's backup benchmark: 200 services with 10 releases each (and a deployment and a journal
// line per release, as deploys leave them), on a real etcd and the embedded store: how long
// `create`, `verify` and `restore` (into a new, empty store of the same kind) take, one scheduled
// backup (create and verify, then write), and the file's size. Records are written straight into
// the store in their stored shapes: 2,000 real deploys would measure Docker, not the backup.

const SERVICES = countArgument(process.argv[2], 'SERVICES', 200); // `node dist/bench/backup.js SERVICES`
const RELEASES = 10;
const at = new Date('2026-11-26T12:00:00.000Z').toISOString();
const digest = `sha256:${'ab'.repeat(32)}`;

function records(): { key: string; value: string }[] {
  const out: { key: string; value: string }[] = [];
  for (let s = 0; s < SERVICES; s++) {
    const name = `svc-${String(s).padStart(4, '0')}`;
    const config = { numInstances: 3, ports: [{ container: 8080 }], env: { GREETING: 'hello', LOG_LEVEL: 'info', FEATURE_FLAGS: 'a,b,c' } };
    const service: Service = {
      name, uuid: '0f8fad5b-d9cb-469f-a165-70867728950e', description: `service ${s}`, containerImage: `registry.local/${name}`, autoDeploy: 'always',
      conflictsWith: '', loadBalanced: true, publicFacing: false, config, createdAt: at, updatedAt: at,
    };
    out.push({ key: serviceKey(name), value: JSON.stringify(service) });
    for (let v = 1; v <= RELEASES; v++) {
      const id = `${(1_700_000_000_000 + s * 100 + v).toString(36)}-${String(s * 100 + v).padStart(8, '0')}`;
      const image = `registry.local/${name}@${digest}`;
      const release: Release = { service: name, version: v, image, digest, tag: `v${v}`, config, pushedAt: 0, deployment: id, createdAt: at };
      const units = [1, 2, 3].map((instance) => ({ unit: `${name}-${instance}.service`, machine: 'm1', active: 'active' as const, sub: 'running' as const }));
      const times = { createdAt: at, updatedAt: at, finishedAt: at };
      const deployment: Deployment = { id, service: name, release: v, image, state: 'succeeded', trigger: 'manual', units, ...times };
      const journal: JournalEntry = { id, at, service: name, deployment: id, kind: 'deploy', message: `deployed v${v}` };
      out.push({ key: releaseKey(name, v), value: JSON.stringify(release) });
      out.push({ key: deploymentKey(id), value: JSON.stringify(deployment) });
      out.push({ key: journalKey(id), value: JSON.stringify(journal) });
    }
  }
  return out;
}

async function fill(store: Store, entries: { key: string; value: string }[]): Promise<void> {
  for (let i = 0; i < entries.length; i += 100) {
    await store.txn([], entries.slice(i, i + 100).map(({ key, value }) => ({ op: 'put' as const, key, value })));
  }
}

async function timed<T>(work: () => Promise<T>): Promise<{ result: T; ms: number }> {
  const start = performance.now();
  const result = await work();
  return { result, ms: performance.now() - start };
}

/** Creates a backup of `source` to a file, verifies it, restores it into `target`. */
async function measure(kind: string, source: Store, target: Store, dir: string): Promise<BenchRow[]> {
  const file = join(dir, `${kind}.backup`);
  const created = await timed(async () => {
    const taken = await takeBackup(source);
    await writePrivateFile(file, taken.text);
    return taken;
  });
  const verified = await timed(() => verifyBackup(created.result.text));
  if (verified.result.firstBad) throw new Error(`a generated record fails its schema: ${JSON.stringify(verified.result.firstBad)}`);
  const restored = await timed(() => restoreBackup(target, decodeBackup(created.result.text), { force: false }));
  // What the scheduler leader does every --backup-interval: create and verify, then the file.
  const scheduled = await timed(() => backupToDirectory(source, join(dir, `${kind}-scheduled`)));
  const keys = created.result.manifest.keyCount;
  const row = (benchmark: string, value: string): BenchRow => ({
    benchmark: `${benchmark} (${kind}, ${keys} keys)`,
    platform: value,
    reference: '-',
    ratio: '-',
    target: '-',
  });
  return [
    row('backup create', ms(created.ms)),
    row('backup verify', ms(verified.ms)),
    row('backup restore', ms(restored.ms)),
    row('scheduled backup (create, verify, write)', ms(scheduled.ms)),
    row('backup file size', formatBytes(Buffer.byteLength(created.result.text))),
  ];
}

const dir = mkdtempSync(join(tmpdir(), 'bench-backup-'));
const entries = records();
const [etcdA, etcdB] = await Promise.all([startEtcd(), startEtcd()]);
const rows: BenchRow[] = [];
try {
  const [source, target] = [new EtcdStore([etcdA.url]), new EtcdStore([etcdB.url])];
  await fill(source, entries);
  rows.push(...(await measure('etcd', source, target, dir)));
  await Promise.all([source.close(), target.close()]);
  const [embeddedSource, embeddedTarget] = await Promise.all([EmbeddedStore.open(join(dir, 'source')), EmbeddedStore.open(join(dir, 'target'))]);
  await fill(embeddedSource, entries);
  rows.push(...(await measure('embedded', embeddedSource, embeddedTarget, dir)));
  await Promise.all([embeddedSource.close(), embeddedTarget.close()]);
} finally {
  await Promise.all([etcdA.stop(), etcdB.stop()]);
  rmSync(dir, { recursive: true, force: true });
}
console.log(`\nBackup and restore, ${SERVICES} services x ${RELEASES} releases (load average ${loadAverage()})`);
printTable(rows);
