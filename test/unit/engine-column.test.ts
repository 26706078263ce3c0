import t from 'tap';
import { engineColumn } from '../../src/client/status-screen.js';

// The DOCKER column of `platform machines` and `platform status`.

t.test('an engine that answers shows its version; one that does not, since when and why', async (t) => {
  t.equal(engineColumn({ reachable: true, version: '20.10.24' }), '20.10.24');
  t.equal(
    engineColumn({ reachable: false, error: 'connect ENOENT /var/run/docker.sock', unreachableSince: '2026-11-23T18:00:00.000Z' }),
    'no engine since 2026-11-23T18:00:00.000Z: connect ENOENT /var/run/docker.sock',
  );
  t.equal(engineColumn({ reachable: false }), 'no engine: unreachable', 'an older agent that does not say since when');
});
