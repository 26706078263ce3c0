import t from 'tap';
import { buildAjv } from '../../src/http/server.js';
import { describeValidation } from '../../src/http/errors.js';
import { OrchestratorServiceCreate } from '../../src/schemas/service.js';
import { applyConfigPatch } from '../../src/roles/directory/config-patch.js';
import { containerCreateOptions } from '../../src/roles/agent/container-spec.js';
import { outOfMemory } from '../../src/roles/agent/containers.js';
import { refusalOf } from '../../src/roles/agent/assignment-check.js';
import { unitCapacity } from '../../src/roles/agent/machine-registration.js';
import { resolveConfig } from '../../src/config.js';
import { specHash } from '../../src/units.js';
import { sampleAssignment } from '../harness/assignment.js';

// Resources and volumes from the declaration to the container: what is accepted, what the
// container gets, what the machine reports.

const validCreate = buildAjv(false).compile(OrchestratorServiceCreate);
const createError = (extra: Record<string, unknown>): string | undefined => {
  if (validCreate({ name: 'web', containerRepository: 'registry.example/web:v1', ...extra })) return undefined;
  return describeValidation((validCreate.errors ?? []) as Parameters<typeof describeValidation>[0], 'body');
};

t.test('resources, placement and volumes are validated with the field and the rule named', async (t) => {
  t.equal(createError({ resources: { memoryMB: 256, cpus: 0.5 }, placement: 'binpack', volumes: [{ name: 'data', path: '/var/lib/data' }], volumeMove: 'allowed' }), undefined);
  t.match(createError({ resources: { memoryMB: 0 } }), /^resources\.memoryMB must be an integer number of megabytes from 6/);
  t.match(createError({ resources: { memoryMB: 12.5 } }), /^resources\.memoryMB must be an integer/);
  t.match(createError({ resources: { cpus: -1 } }), /^resources\.cpus must be a number of CPUs from 0\.01 to 1024/);
  t.match(createError({ resources: {} }), /resources must name at least one field/);
  t.match(createError({ placement: 'random' }), /placement must be "spread" .* or "binpack"/);
  t.match(createError({ volumes: [{ name: 'Data!', path: '/data' }] }), /^volumes\.0\.name must be 1-63 lowercase letters/);
  for (const path of ['data', '/data/../etc', '/..', '/data/./x', '/data:ro', '/da ta', '/']) {
    t.match(createError({ volumes: [{ name: 'data', path }] }), /^volumes\.0\.path must be an absolute path/, path);
  }
  t.match(createError({ volumeMove: 'sometimes' }), /volumeMove must be "never"/);
});

t.test('a patch sets and resets them; two volumes with one name or path are refused', async (t) => {
  const base = { numInstances: 1, ports: [], env: {} };
  const set = applyConfigPatch(base, { resources: { memoryMB: 512 }, placement: 'binpack', volumes: [{ name: 'data', path: '/data' }] });
  t.same(set, { ...base, resources: { memoryMB: 512 }, placement: 'binpack', volumes: [{ name: 'data', path: '/data' }] });
  t.same(applyConfigPatch(set, { resources: null, placement: null, volumes: null }), base);
  t.throws(() => applyConfigPatch(base, { volumes: [{ name: 'data', path: '/a' }, { name: 'data', path: '/b' }] }), { statusCode: 400, message: 'volumes: name data appears twice; each volume needs its own name' });
  t.throws(() => applyConfigPatch(base, { volumes: [{ name: 'a', path: '/data' }, { name: 'b', path: '/data' }] }), { statusCode: 400, message: /path \/data appears twice/ });
});

t.test('the container gets the memory limit with no extra swap, the CPU quota and its named volumes', async (t) => {
  const assignment = sampleAssignment({ resources: { memoryMB: 256, cpus: 1.5 }, volumes: [{ name: 'data', path: '/data' }] });
  // The mounts come checked from unit-volumes.ts (test/integration/volume-names.test.ts): the container takes them as given.
  const mounts = [{ Type: 'volume' as const, Source: 'web.1.data', Target: '/data' }];
  const { HostConfig: host } = containerCreateOptions({ assignment, machineId: 'm1', network: 'host', port: 8080, mounts });
  t.equal(host?.Memory, 256 * 1024 * 1024);
  t.equal(host?.MemorySwap, 256 * 1024 * 1024, 'no swap beyond the limit');
  t.equal(host?.NanoCpus, 1_500_000_000);
  t.equal(host?.Binds, undefined, 'never a host path');
  t.same(host?.Mounts, mounts);
  const plain = containerCreateOptions({ assignment: sampleAssignment(), machineId: 'm1', network: 'host', port: 8080 }).HostConfig;
  t.same([plain?.Memory, plain?.NanoCpus, plain?.Mounts], [undefined, undefined, undefined], 'nothing declared, nothing set');
});

t.test('an agent refuses a volume an assignment could only have been written with by hand', async (t) => {
  t.equal(refusalOf(sampleAssignment({ volumes: [{ name: 'data', path: '/data' }] })), undefined);
  t.match(refusalOf({ ...sampleAssignment(), volumes: [{ name: 'data', path: '/../etc' }] }), /^assignment refused: volumes\.0\.path must be an absolute path/);
  t.match(refusalOf({ ...sampleAssignment(), volumes: [{ name: 'data', path: '/data', source: '/etc' }] }), /source is not a known field/);
});

t.test('a unit killed for memory says so with its limit', async (t) => {
  t.equal(outOfMemory(256 * 1024 * 1024), 'out of memory (limit 256 MB)');
  t.equal(outOfMemory(0), 'out of memory (no limit: the machine ran out)');
});

t.test('the machine reports the engine figures less the reserve, or the operator cap', async (t) => {
  const engine = { NCPU: 4, MemTotal: 8 * 1024 ** 3 };
  t.same(unitCapacity(engine, { reserveMemoryMB: 512, reserveCpus: 0 }), { memoryMB: 7680, cpus: 4 });
  t.same(unitCapacity(engine, { reserveMemoryMB: 1024, reserveCpus: 0.5 }), { memoryMB: 7168, cpus: 3.5 });
  t.same(unitCapacity(engine, { reserveMemoryMB: 0, reserveCpus: 0, capacityMemoryMB: 1000, capacityCpus: 1 }), { memoryMB: 1000, cpus: 1 });
  t.same(unitCapacity({ NCPU: 1, MemTotal: 256 * 1024 ** 2 }, { reserveMemoryMB: 512, reserveCpus: 2 }), { memoryMB: 0, cpus: 0 }, 'never below 0');
  t.same(unitCapacity(undefined, { reserveMemoryMB: 512, reserveCpus: 0 }), {}, 'unknown until the engine answers');
});

t.test('agent flags: reserve defaults, caps, and a clear error for a bad value', async (t) => {
  const agent = (flags: Record<string, string>) => resolveConfig({ role: 'agent', ...flags }, {}).agent;
  t.same([agent({}).reserveMemoryMB, agent({}).reserveCpus], [512, 0]);
  t.same([agent({ capacityMemory: '1024', capacityCpus: '1.5' }).capacityMemoryMB, agent({ capacityCpus: '1.5' }).capacityCpus], [1024, 1.5]);
  t.throws(() => agent({ reserveCpus: 'lots' }), { message: '--reserve-cpus must be a number from 0 to 4096, got lots' });
  t.throws(() => agent({ capacityMemory: '1.5' }), { message: /--capacity-memory must be an integer/ });
});

t.test('the spec of a unit without resources or volumes is what it was before they existed', async (t) => {
  const base = { image: 'i@sha256:1', env: { A: '1' }, ports: [] };
  t.equal(specHash(base), specHash({ ...base, resources: undefined, volumes: [] }));
  t.not(specHash(base), specHash({ ...base, resources: { memoryMB: 64 } }));
  t.equal(specHash({ ...base, resources: { memoryMB: 64, cpus: 1 } }), specHash({ ...base, resources: { cpus: 1, memoryMB: 64 } }), 'key order does not matter');
});
