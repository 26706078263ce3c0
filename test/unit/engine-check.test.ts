import t from 'tap';
import type Docker from 'dockerode';
import { EngineCheck } from '../../src/roles/agent/docker-client.js';

// The agent's engine check on every reconcile pass: `/_ping`, with the version asked only when
// the engine first answers, after an outage, and in the background once it is old.

/** An engine answering `ping` and `version` as told, counting the asks. */
function engine() {
  const state = { up: true, version: '20.10.24', pings: 0, versions: 0 };
  const docker = {
    ping: async () => {
      state.pings += 1;
      if (!state.up) throw new Error('connect ENOENT /var/run/docker.sock');
      return Buffer.from('OK');
    },
    version: async () => {
      state.versions += 1;
      return { Version: state.version };
    },
  } as unknown as Pick<Docker, 'ping' | 'version'>;
  return { state, docker };
}

t.test('every pass pings; the version is asked once while it is fresh', async (t) => {
  const { state, docker } = engine();
  const check = new EngineCheck(docker);
  for (let pass = 0; pass < 5; pass++) t.same(await check.check(), { reachable: true, version: '20.10.24' });
  t.equal(state.pings, 5);
  t.equal(state.versions, 1);
});

t.test('after the engine was unreachable its version is asked again before the pass goes on', async (t) => {
  const { state, docker } = engine();
  const check = new EngineCheck(docker);
  await check.check();
  state.up = false;
  t.same(await check.check(), { reachable: false, error: 'connect ENOENT /var/run/docker.sock' });
  state.up = true;
  state.version = '24.0.7';
  t.same(await check.check(), { reachable: true, version: '24.0.7' }, 'an engine that came back upgraded says so at once');
  t.equal(state.versions, 2);
});

t.test('an old version is asked again in the background: the pass does not wait for it', async (t) => {
  const { state, docker } = engine();
  const check = new EngineCheck(docker, 0);
  await check.check();
  state.version = '24.0.7';
  t.same(await check.check(), { reachable: true, version: '20.10.24' }, 'this pass reports what it knew');
  await new Promise((resolve) => setImmediate(resolve));
  t.same(await check.check(), { reachable: true, version: '24.0.7' }, 'the next one has the new answer');
});
