import t from 'tap';
import { ConfigError, defaultUnitLogs, resolveConfig } from '../../src/config.js';
import { containerCreateOptions } from '../../src/roles/agent/container-spec.js';
import { sampleAssignment } from '../harness/assignment.js';

// A unit's output is bounded on its machine: json-file rotation, 10 MB × 3 unless the agent says
// otherwise (--log-max-size, --log-max-files or their environment variables).

t.test('an agent rotates unit output at 10 MB and keeps 3 files by default', async (t) => {
  t.same(resolveConfig({}, {}).agent.unitLogs, { maxSize: '10m', maxFiles: 3 });
  t.same(defaultUnitLogs, { maxSize: '10m', maxFiles: 3 });
});

t.test('flags and environment set the rotation per agent; flags win', async (t) => {
  t.same(resolveConfig({ logMaxSize: '5M', logMaxFiles: '2' }, {}).agent.unitLogs, { maxSize: '5m', maxFiles: 2 });
  t.same(resolveConfig({}, { PLATFORM_LOG_MAX_SIZE: '1g', PLATFORM_LOG_MAX_FILES: '10' }).agent.unitLogs, { maxSize: '1g', maxFiles: 10 });
  t.same(resolveConfig({ logMaxSize: '200k' }, { PLATFORM_LOG_MAX_SIZE: '1g' }).agent.unitLogs.maxSize, '200k');
});

t.test('a size or count out of bounds is refused, naming the flag and the rule', async (t) => {
  for (const size of ['10', '10mb', '0m', '-1m', '10 m', '1t', '63k']) {
    t.throws(() => resolveConfig({ logMaxSize: size }, {}), new ConfigError(`--log-max-size must be a size such as 10m: a whole number and k, m or g, at least 64k, got ${size}`), size);
  }
  for (const count of ['0', '101', '1.5', 'three']) {
    t.throws(() => resolveConfig({ logMaxFiles: count }, {}), new ConfigError(`--log-max-files must be an integer from 1 to 100, got ${count}`), count);
  }
});

t.test("a unit container's output goes to json-file with the agent's rotation", async (t) => {
  const spec = { assignment: sampleAssignment(), machineId: 'm1', network: 'host' as const, port: 8080 };
  t.same(containerCreateOptions({ ...spec, logs: { maxSize: '5m', maxFiles: 2 } }).HostConfig?.LogConfig, { Type: 'json-file', Config: { 'max-size': '5m', 'max-file': '2' } });
  t.equal(containerCreateOptions(spec).HostConfig?.LogConfig, undefined, 'none given: the engine decides, as before');
});
