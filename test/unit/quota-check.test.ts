import t from 'tap';
import { assertWithinQuotas } from '../../src/roles/directory/quota-check.js';
import { newService } from '../../src/roles/directory/routes.js';
import type { Quota } from '../../src/schemas/quota.js';
import type { Resources, Service } from '../../src/schemas/service.js';

// The quota rule on its own (audit L5): the services a glob matches, together, against its limits.

const service = (name: string, numInstances: number, resources?: Resources): Service =>
  newService({ name, containerImage: `registry.example/${name}`, numInstances, ...(resources ? { resources } : {}) }, '2026-11-26T00:00:00.000Z');
const quota = (limits: Omit<Quota, 'services' | 'setAt'>): Quota => ({ services: 'team-a-*', ...limits, setAt: '2026-11-26T00:00:00.000Z' });
const refusal = (check: () => void): string | undefined => {
  try {
    check();
    return undefined;
  } catch (error) {
    t.equal((error as { statusCode?: number }).statusCode, 403);
    return (error as Error).message;
  }
};

t.test('CPUs add up over units and services, and fractions do not round a change past its limit', async (t) => {
  const quotas = [quota({ cpus: 1.5 })];
  const declared = [service('team-a-web', 2, { cpus: 0.5 })];
  t.equal(refusal(() => assertWithinQuotas(quotas, declared, service('team-a-api', 1, { cpus: 0.5 }))), undefined, '1.5 of 1.5');
  t.equal(
    refusal(() => assertWithinQuotas(quotas, declared, service('team-a-api', 3, { cpus: 0.2 }))),
    'quota team-a-* allows 1.5 CPUs for its services together: team-a-api would reserve 0.6, the others use 1, so 0.5 is left (an admin changes it with platform quota set)',
  );
});

t.test('under a quota of memory or CPUs a unit must declare it when the service is new, grows or drops its limit', async (t) => {
  const quotas = [quota({ memoryMB: 4096 })];
  t.equal(refusal(() => assertWithinQuotas(quotas, [], service('team-a-web', 1))), 'quota team-a-* bounds MB of memory: team-a-web must declare resources.memoryMB for its units');
  const undeclared = service('team-a-old', 2);
  t.equal(refusal(() => assertWithinQuotas(quotas, [undeclared], { ...undeclared, description: 'changed' })), undefined, 'an older service that changes no reservation passes');
  t.ok(refusal(() => assertWithinQuotas(quotas, [undeclared], service('team-a-old', 3))), 'but may not grow');
  const declared = service('team-a-db', 1, { memoryMB: 512 });
  t.ok(refusal(() => assertWithinQuotas(quotas, [declared], service('team-a-db', 1, { cpus: 1 }))), 'nor drop its limit');
});

t.test('only services the glob matches count, and every quota that matches applies', async (t) => {
  const quotas = [quota({ units: 3 }), { ...quota({ units: 1 }), services: 'team-a-web' }];
  const declared = [service('team-b-web', 50), service('team-a-api', 2)];
  t.equal(refusal(() => assertWithinQuotas(quotas, declared, service('team-a-job', 1))), undefined);
  t.match(refusal(() => assertWithinQuotas(quotas, declared, service('team-a-web', 2))), /^quota team-a-\* allows 3 units/);
  t.match(refusal(() => assertWithinQuotas(quotas, [], service('team-a-web', 2))), /^quota team-a-web allows 1 units/);
});
