import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { keepUnitOutput, readUnitOutput } from '../../src/store/records/unit-outputs.js';
import { createService } from '../../src/store/records/services.js';
import { Housekeeping } from '../../src/roles/scheduler/housekeeping/housekeeping.js';
import { defaultRetention } from '../../src/config.js';
import { describedOutput, previousOutputText } from '../../src/roles/orchestrator/previous-output.js';
import { instanceOf } from '../../src/units.js';
import { withEngineLine } from '../../src/roles/agent/failed-output.js';
import type { UnitOutput } from '../../src/schemas/unit-output.js';
import type { Service } from '../../src/schemas/service.js';

// A failed unit's kept output (platform logs NAME N --previous): what the orchestrator answers of
// it, and that it goes with its service.

const output = (service: string, instance: number, lines: string[], truncated = false): UnitOutput => ({
  service,
  instance,
  unit: `${service}-${instance}.service`,
  machine: 'm1',
  deployment: '0mx1o3g0z-735e67b6',
  release: 2,
  image: '127.0.0.1:5000/team/hello@sha256:' + '0'.repeat(64),
  container: 'c77abd6c566c' + 'f'.repeat(52),
  exitCode: 3,
  error: 'exited with code 3',
  errorKind: 'crash-loop',
  at: '2026-11-29T10:00:00.000Z',
  lines,
  ...(truncated ? { truncated } : {}),
});

t.test('a unit name gives its instance only for its own service', async (t) => {
  t.equal(instanceOf('web', 'web-12.service'), 12);
  t.equal(instanceOf('web-api', 'web-api-1.service'), 1);
  t.equal(instanceOf('web', 'web-api-1.service'), undefined);
  t.equal(instanceOf('api', 'web-api-1.service'), undefined);
});

t.test('the kept output is told after a line naming the run, its deployment, release and exit', async (t) => {
  t.equal(
    describedOutput(output('web', 1, ['a', 'b', 'c'], true), 2),
    '-- previous run of web-1.service: exited with code 3 at 2026-11-29T10:00:00.000Z; deployment 0mx1o3g0z-735e67b6, release v2, machine m1, ' +
      'container c77abd6c566c; its last 2 lines (older output cut) --\nb\nc\n',
  );
  t.match(describedOutput(output('web', 1, ['a']), 0), /its last 0 lines --\n$/);
});

t.test("a container the engine refused to create is named as such; the engine's error is its one line, marked", async (t) => {
  const { container: _container, exitCode: _exitCode, ...refused } = output('web', 1, []);
  const engineError = 'invalid mount config for type "bind": bind source path does not exist: /srv/nope';
  const lines = withEngineLine('', refused.at, engineError).trimEnd().split('\n');
  const text = describedOutput({ ...refused, error: `container failed to start: ${engineError}`, errorKind: 'container-start', lines }, 100);
  t.equal(
    text,
    `-- previous run of web-1.service: container failed to start: ${engineError} at 2026-11-29T10:00:00.000Z; deployment 0mx1o3g0z-735e67b6, release v2, machine m1, ` +
      `no container (the engine refused to create it); its last 1 lines --\n2026-11-29T10:00:00.000Z [engine] ${engineError}\n`,
  );
});

t.test("the engine's error follows the program's output on a line of its own, its line breaks folded", async (t) => {
  const at = '2026-11-29T10:00:00.000Z';
  t.equal(withEngineLine('T1 started\nT2 half a line', at, 'port is already allocated'), `T1 started\nT2 half a line\n${at} [engine] port is already allocated\n`);
  t.equal(withEngineLine('T1 done\n', at, 'OCI runtime create failed:\n  exec: "nope"\n'), `T1 done\n${at} [engine] OCI runtime create failed: exec: "nope"\n`);
});

t.test('kept per instance, answered by name, 404 or 400 naming why, and deleted with its service', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'unit-outputs-'));
  const store = await EmbeddedStore.open(dir);
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  await keepUnitOutput(store, output('kept', 1, ['first failure']));
  await keepUnitOutput(store, output('kept', 1, ['newest failure']));
  await keepUnitOutput(store, output('gone', 2, ['x']));
  t.same((await readUnitOutput(store, 'kept', 1))?.lines, ['newest failure'], 'the newest failure replaces the one before');
  t.match(await previousOutputText(store, 'kept', 'kept-1.service', 100, false), /\nnewest failure\n$/);
  await t.rejects(previousOutputText(store, 'kept', 'kept-2.service', 100, false), { statusCode: 404, message: /no failed run of kept-2\.service is kept/ });
  await t.rejects(previousOutputText(store, 'kept', 'other-1.service', 100, false), { statusCode: 404, message: /not a unit of service kept/ });
  await t.rejects(previousOutputText(store, 'kept', 'kept-1.service', 100, true), { statusCode: 400, message: /previous and follow cannot be combined/ });

  await createService(store, { name: 'kept', uuid: 'u1' } as Service);
  await new Housekeeping(store, defaultRetention, pino({ level: 'silent' }) as unknown as FastifyBaseLogger).pruneHistory();
  t.ok(await readUnitOutput(store, 'kept', 1), 'a declared service keeps its output');
  t.equal(await readUnitOutput(store, 'gone', 2), undefined, "a deleted service's output goes");
});
