import t from 'tap';
import { resolveConfig } from '../../src/config.js';
import { singleMachineSettings } from '../../src/single-machine.js';
import { destinationRefusal, RegistryAllowList } from '../../src/http/registry-policy.js';

// `platform up`'s single-machine defaults (issue 31): registries on this machine allowed, host
// networking on an engine without a bridge, each said in one line; an explicit choice is kept.

const engine = (hasBridge: boolean | undefined) => ({ dockerHost: 'unix:///var/run/docker.sock', hasBridge });

t.test('registries on this machine are allowed, beside the ones the operator named, and it says so', async (t) => {
  const config = resolveConfig({ allowedRegistry: ['10.0.0.0/8'] }, {});
  const settled = singleMachineSettings(config, false, engine(true));
  t.same(settled.config.scheduler.allowedRegistries, ['10.0.0.0/8', '127.0.0.1', 'localhost', '::1']);
  t.same(settled.notices, ['registries on this machine (127.0.0.1, localhost, ::1) are allowed without --allowed-registry']);
  const allowed = new RegistryAllowList(settled.config.scheduler.allowedRegistries);
  for (const registry of ['http://127.0.0.1:5000', 'http://localhost:5000', 'http://[::1]:5000']) t.equal(await destinationRefusal(new URL(registry), allowed), undefined, registry);
  t.match(await destinationRefusal(new URL('http://192.168.1.2:5000'), allowed), /private address/, 'other special addresses still need the flag');
  t.match(await destinationRefusal(new URL('http://127.0.0.2:5000'), allowed), /loopback/, 'only this machine\'s addresses, not all of 127/8');
});

t.test('an engine without a bridge network gets host networking, said in one line', async (t) => {
  const settled = singleMachineSettings(resolveConfig({}, {}), false, engine(false));
  t.equal(settled.config.agent.network, 'host');
  t.equal(settled.notices[1], 'the Docker engine at unix:///var/run/docker.sock has no bridge network: units use host networking (--network host)');
});

t.test('an engine with a bridge, one that does not answer, or an explicit --network keeps the network as it was', async (t) => {
  t.equal(singleMachineSettings(resolveConfig({}, {}), false, engine(true)).config.agent.network, 'bridge');
  t.equal(singleMachineSettings(resolveConfig({}, {}), false, engine(undefined)).config.agent.network, 'bridge');
  const chosen = singleMachineSettings(resolveConfig({ network: 'bridge' }, {}), true, engine(false));
  t.equal(chosen.config.agent.network, 'bridge');
  t.equal(chosen.notices.length, 1);
});
