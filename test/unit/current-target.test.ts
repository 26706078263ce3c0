import t from 'tap';
import { currentTarget, type Deployment } from '../../src/schemas/release.js';

// Which deployment decides what a service runs: self-healing re-places its units, and a deploy of
// the same image and config is "unchanged" against it.

let sequence = 0;
const deployment = (state: Deployment['state'], trigger = 'manual', release = 1): Deployment => {
  sequence += 1;
  return { id: `d${sequence}`, service: 'web', release, image: `web@v${release}`, state, trigger, units: [], createdAt: '', updatedAt: '' };
};

t.test('the newest deployment in flight or succeeded; failed and superseded ones are passed over', async (t) => {
  const succeeded = deployment('succeeded', 'manual', 1);
  t.equal(currentTarget([deployment('failed', 'manual', 3), deployment('superseded', 'manual', 2), succeeded]), succeeded);
  const rolling = deployment('rolling', 'manual', 4);
  t.equal(currentTarget([rolling, succeeded]), rolling);
  t.equal(currentTarget([deployment('failed')]), undefined);
  t.equal(currentTarget([]), undefined);
});

t.test('after a stop the service runs nothing, whatever succeeded before it', async (t) => {
  t.equal(currentTarget([deployment('succeeded', 'stop', 2), deployment('succeeded', 'manual', 2)]), undefined);
  t.equal(currentTarget([deployment('failed', 'manual', 3), deployment('succeeded', 'stop', 2), deployment('succeeded')]), undefined, 'nor after a failed deploy that followed the stop');
  const redeployed = deployment('rolling', 'manual', 3);
  t.equal(currentTarget([redeployed, deployment('succeeded', 'stop', 2)]), redeployed, 'a deploy after the stop counts again');
});
