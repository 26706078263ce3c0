import t from 'tap';
import { compileServiceGlob } from '../../src/service-glob.js';
import { conflicts, placeInstances } from '../../src/placement/planner.js';
import { decide } from '../../src/auth/access.js';
import { buildAjv } from '../../src/http/server.js';
import { ConflictsWith } from '../../src/schemas/service.js';
import { ServiceGlob } from '../../src/schemas/token.js';
import { ServiceName } from '../../src/schemas/common.js';

// The audit's pattern: against this valid 63-character name, picomatch took 36 s.
const AUDIT_GLOB = '*-*-*-*-*-*-*-*-x';
const AUDIT_NAME = `a${'-'.repeat(61)}a`;

const elapsedMs = (run: () => void): number => {
  const started = performance.now();
  run();
  return performance.now() - started;
};

t.test('literals match only themselves, * matches any run of characters', async (t) => {
  const cases: [string, string, boolean][] = [
    ['web', 'web', true],
    ['web', 'web-1', false],
    ['web-*', 'web-', true],
    ['web-*', 'web-api', true],
    ['web-*', 'api-web', false],
    ['*-db', 'users-db', true],
    ['*-db', 'users-db-2', false],
    ['*', 'anything', true],
    ['a*b*c', 'abc', true],
    ['a*b*c', 'aXbXc', true],
    ['a*b*c', 'acb', false],
    ['ab*ba', 'aba', false],
    ['**', 'x', true],
    ['*a*a*', 'aa', true],
    ['*a*a*', 'a', false],
  ];
  for (const [glob, name, expected] of cases) t.equal(compileServiceGlob(glob)(name), expected, `${glob} against ${name}`);
});

t.test('the matcher agrees with a regular expression on random globs and names', async (t) => {
  const pick = (alphabet: string, length: number) => Array.from({ length }, () => alphabet[Math.floor(Math.random() * alphabet.length)]).join('');
  for (let i = 0; i < 5000; i++) {
    const glob = pick('ab-*', 1 + Math.floor(Math.random() * 8));
    const name = pick('ab-', 1 + Math.floor(Math.random() * 10));
    const oracle = new RegExp(`^${glob.split('*').join('.*')}$`);
    if (compileServiceGlob(glob)(name) !== oracle.test(name)) t.fail(`${glob} against ${name}`);
  }
  t.pass('5000 pairs agree');
});

t.test("the audit's conflictsWith finishes in milliseconds, in the planner too", async (t) => {
  t.ok(buildAjv(false).compile(ServiceName)(AUDIT_NAME), 'a valid service name of 63 characters');
  t.ok(elapsedMs(() => t.notOk(compileServiceGlob(AUDIT_GLOB)(AUDIT_NAME))) < 50, 'the matcher');
  const hostile = { service: 'hostile', conflictsWith: AUDIT_GLOB, hostPorts: [] };
  const victim = { service: AUDIT_NAME, conflictsWith: '', hostPorts: [] };
  t.ok(elapsedMs(() => t.notOk(conflicts(hostile, victim))) < 50, 'conflicts()');
  const machines = [{ id: 'm1', capacity: 10 }];
  const elapsed = elapsedMs(() => {
    const plan = placeInstances({ machines, current: [{ service: AUDIT_NAME, instance: 1, machine: 'm1' }], rules: [hostile, victim], service: 'hostile', instances: [1] });
    t.same(plan.place, [{ instance: 1, machine: 'm1' }], 'no conflict: the name does not end in x');
  });
  t.ok(elapsed < 200, `placement took ${elapsed.toFixed(1)} ms`);
});

t.test("a token's --services glob with the audit's pattern decides in milliseconds", async (t) => {
  const token = { name: 'ci', role: 'deploy' as const, services: AUDIT_GLOB };
  t.ok(elapsedMs(() => t.equal(decide(token, 'deploy', AUDIT_NAME).allowed, false)) < 50);
});

t.test('the schemas accept only lowercase letters, digits, "-" and "*", up to 63 characters', async (t) => {
  const ajv = buildAjv(false);
  const conflictsWith = ajv.compile(ConflictsWith);
  const services = ajv.compile(ServiceGlob);
  for (const glob of ['web-*', AUDIT_GLOB, 'x'.repeat(63)]) {
    t.ok(conflictsWith(glob), `conflictsWith ${glob}`);
    t.ok(services(glob), `services ${glob}`);
  }
  t.ok(conflictsWith(''), 'an empty conflictsWith declares no conflict');
  for (const glob of ['web-?', '[a-z]*', '{a,b}', 'web/*', '!web', 'Web', 'x'.repeat(64)]) {
    t.notOk(conflictsWith(glob), `conflictsWith ${glob}`);
    t.notOk(services(glob), `services ${glob}`);
  }
});
