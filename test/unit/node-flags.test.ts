import t from 'tap';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { nodeFlagsOf, platformBin } from '../harness/platform.js';

// V8 reads its heap flags only when Node starts, so each launcher names them (bin/platform's shebang
// explains the flag): the development launcher, the Debian package's /usr/bin/platform, the
// container image's ENTRYPOINT, and the tests' harness, which reads them from bin/platform. A
// launcher that lost them would run the roles with a young generation four times larger (issue 29).

const file = (path: string) => readFileSync(fileURLToPath(new URL(`../../../${path}`, import.meta.url)), 'utf8');
const flags = nodeFlagsOf(platformBin);

t.test('bin/platform names the young generation\'s size', async (t) => {
  t.same(flags, ['--max-semi-space-size=4']);
});

t.test('the Debian package\'s launcher runs Node with the same flags', async (t) => {
  const exec = file('deploy/debian/platform').split('\n').find((line) => line.startsWith('exec '));
  t.equal(exec, `exec /usr/bin/node ${flags.join(' ')} /usr/lib/platform/dist/src/cli.js "$@"`);
});

t.test('the container image\'s ENTRYPOINT runs Node with the same flags', async (t) => {
  const entrypoint = file('Dockerfile').split('\n').find((line) => line.startsWith('ENTRYPOINT '));
  t.equal(entrypoint, `ENTRYPOINT ${JSON.stringify(['node', ...flags, 'bin/platform']).replaceAll(',', ', ')}`);
});
