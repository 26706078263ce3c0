import t from 'tap';
import { operationIdOf, summaryOf } from '../../src/http/openapi.js';
import { orchestratorApi } from '../../src/schemas/api.js';
import { splitRouteKey } from '../../src/schemas/route-key.js';

t.test('operation ids are made from the method and the path, one per route', async (t) => {
  t.equal(operationIdOf('PATCH', '/services/:name/config/next'), 'patchServicesByNameConfigNext');
  t.equal(operationIdOf('POST', '/hooks/docker-hub'), 'postHooksDockerHub');
  const ids = Object.keys(orchestratorApi).map((key) => {
    const { method, url } = splitRouteKey(key as keyof typeof orchestratorApi);
    return operationIdOf(method, url);
  });
  t.equal(new Set(ids).size, ids.length, 'no two routes of the API table share one');
});

t.test("a summary is the description's first sentence, or the method and path", async (t) => {
  t.equal(summaryOf('GET', '/journal', 'The journal of events, newest first; page back with `before`.'), 'The journal of events, newest first; page back with `before`');
  t.equal(summaryOf('PUT', '/x', 'Drain a machine: no new unit is placed on it.'), 'Drain a machine');
  t.equal(summaryOf('GET', '/services/:name/units', undefined), 'GET /services/{name}/units');
  t.equal(summaryOf('GET', '/x', 'a'.repeat(300)).length, 100, 'at most 100 characters');
});
