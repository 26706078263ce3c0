import t from 'tap';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { printsAmongOthers, printsAsShown, tourSteps } from '../harness/readme-tour.js';

// How the tour test reads the README and compares what the commands print with what it shows:
// a comparison that let anything through would make the tour test unable to fail.

const readme = readFileSync(fileURLToPath(new URL('../../../README.md', import.meta.url)), 'utf8');

t.test('the README has a tour: commands in terminals of their own, then commands run to their end, each with its output', async (t) => {
  const steps = tourSteps(readme);
  t.ok(steps.filter((step) => step.kind === 'own-terminal').length >= 2, 'a registry and the platform');
  const runs = steps.filter((step) => step.kind === 'run');
  t.ok(runs.length >= 3);
  for (const step of runs) t.ok(step.output, `the block at line ${step.line} shows what it prints`);
});

t.test('blocks are told apart by their info strings only', async (t) => {
  const text = ['```sh', 'not the tour', '```', '```sh tour', 'echo a', '```', '```text tour-output', 'a', '```', '```sh tour-own-terminal', 'serve', '```'].join('\n');
  t.same(tourSteps(text), [
    { kind: 'run', script: 'echo a\n', output: 'a\n', line: 4 },
    { kind: 'own-terminal', script: 'serve\n', line: 10 },
  ]);
  t.throws(() => tourSteps('```text tour-output\na\n```\n'), /follows no tour command block/);
  t.throws(() => tourSteps('```bash tour\na\n```\n'), /is ```sh, not ```bash/);
});

t.test('an output matches whole, with … for any text and padding of any width', async (t) => {
  const shown = 'UNIT             MACHINE  ADDRESS\nhello-1.service  …  127.0.0.1:…\n';
  t.ok(printsAsShown('UNIT             MACHINE                           ADDRESS\nhello-1.service  3d1219c7c4c5404aaa1f6d2a48adfda4  127.0.0.1:4123  \n', shown));
  t.notOk(printsAsShown('UNIT  MACHINE  ADDRESS\nhello-1.service  m1  10.0.0.1:4123\n', shown), 'a different address');
  t.notOk(printsAsShown('UNIT  MACHINE  ADDRESS\nhello-1.service  m1  127.0.0.1:4123\nhello-2.service  m1  127.0.0.1:4124\n', shown), 'a line more');
  t.notOk(printsAsShown('UNIT  MACHINE  ADDRESS\n', shown), 'a line less');
  t.notOk(printsAsShown('UNITS  MACHINE  ADDRESS\nhello-1.service  m1  127.0.0.1:1\n', shown), 'another header');
});

t.test('a line of … alone stands for any lines, none included', async (t) => {
  const shown = 'deploying hello v1\n…\ndeployment … succeeded\n';
  t.ok(printsAsShown('deploying hello v1\ndeployment 1 succeeded\n', shown));
  t.ok(printsAsShown('deploying hello v1\nhello v1  rolling  0/3\nhello v1  rolling  2/3\ndeployment 1 succeeded\n', shown));
  t.notOk(printsAsShown('deploying hello v1\ndeployment 1 failed\n', shown));
});

t.test("a long-running command's lines are found in order among its logs", async (t) => {
  const shown = 'platform is up (…)\ndashboard: http://127.0.0.1:9004/\n';
  t.ok(printsAmongOthers('{"level":30}\nplatform is up (embedded)\n{"level":40}\ndashboard: http://127.0.0.1:9004/\n', shown));
  t.notOk(printsAmongOthers('dashboard: http://127.0.0.1:9004/\nplatform is up (embedded)\n', shown), 'out of order');
  t.notOk(printsAmongOthers('platform is up (embedded)\n', shown), 'a line missing');
});
