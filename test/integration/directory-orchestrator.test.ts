import t from 'tap';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';

// The service directory and the orchestrator as real processes on a real etcd.

const etcd = await startEtcd();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const directory = await serveRole('directory', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
t.teardown(async () => {
  await Promise.all([directory.stop(), orchestrator.stop()]);
  await etcd.stop();
});

const dir = (path: string) => `${directory.url}${path}`;
const orch = (path: string) => `${orchestrator.url}${path}`;
const web = { name: 'www', description: 'the web', containerImage: '127.0.0.1:5000/team/web', numInstances: 3, autoDeploy: 'always', conflictsWith: 'web-*', ports: [{ container: 8080, host: 80 }] };

t.test('POST /services answers 201 with exactly the meta member', async (t) => {
  const created = await http('POST', dir('/services'), web);
  t.equal(created.status, 201);
  t.same(Object.keys(created.body), ['meta']);
  t.match(created.body.meta, { statusCode: 201, ok: true, name: 'www', uuid: /^[0-9a-f-]{36}$/ });
  const listed = await http('GET', dir('/services'));
  t.equal(listed.status, 200);
  const stored = listed.body.find((s: { name: string }) => s.name === 'www');
  t.match(stored, { name: 'www', containerImage: '127.0.0.1:5000/team/web', autoDeploy: 'always', conflictsWith: 'web-*', loadBalanced: true, publicFacing: false });
  t.same(stored.config, { numInstances: 3, ports: [{ container: 8080, host: 80 }], env: {} });
});

t.test('a duplicate name is rejected with 409 and stores nothing', async (t) => {
  const again = await http('POST', dir('/services'), { ...web, description: 'other' });
  t.equal(again.status, 409);
  t.match(again.body, { statusCode: 409, error: 'Conflict', message: /www already exists/ });
  t.equal((await http('GET', dir('/services/www'))).body.description, 'the web');
});

t.test('of two concurrent creates of one name exactly one gets 201', async (t) => {
  const results = await Promise.all(Array.from({ length: 8 }, (_, i) => http('POST', dir('/services'), { name: 'race', containerImage: 'race', description: String(i) })));
  t.same(results.map((r) => r.status).sort(), [201, 409, 409, 409, 409, 409, 409, 409]);
});

t.test('bad input gets 400 naming the field and the rule, and changes nothing', async (t) => {
  const cases: [unknown, RegExp][] = [
    [{ ...web, name: 'Web_1' }, /^name must be a DNS label/],
    [{ ...web, name: 'a'.repeat(64) }, /^name must be a DNS label/],
    [{ ...web, name: 'x1', numInstances: -1 }, /^numInstances must be an integer from 0 to 1000/],
    [{ ...web, name: 'x1', numInstances: 1.5 }, /^numInstances must be an integer/],
    [{ ...web, name: 'x1', numInstances: '3' }, /^numInstances must be an integer/],
    [{ ...web, name: 'x1', ports: [{ container: 70000 }] }, /^ports\.0\.container must be an integer from 1 to 65535/],
    [{ ...web, name: 'x1', conflictsWith: 'web[' }, /^conflictsWith must be a glob over service names/],
    [{ ...web, name: 'x1', conflictsWith: 'web-?' }, /^conflictsWith must be a glob over service names of up to 63 characters: lowercase letters, digits, "-" and "\*" wildcards/],
    [{ ...web, name: 'x1', conflictsWith: `${'*-'.repeat(32)}x` }, /^conflictsWith must be a glob over service names of up to 63 characters/],
    [{ ...web, name: 'x1', env: { '1BAD': 'x' } }, /env/],
    [{ ...web, name: 'x1', colour: 'red' }, /^colour is not a known field/],
    [{ name: 'x1', containerRepository: 'img' }, /containerRepository is not accepted here: this API names the image repository containerImage/],
    [{ name: 'x1' }, /^containerImage is required/],
    [{ name: 'x1', containerImage: 'img; rm -rf /' }, /^containerImage must be an image reference/],
    [{ name: 'scheduler', containerImage: 'img' }, /reserved/],
  ];
  for (const [body, message] of cases) {
    const reply = await http('POST', dir('/services'), body);
    t.equal(reply.status, 400, JSON.stringify(body));
    t.match(reply.body, { statusCode: 400, error: 'Bad Request', message }, JSON.stringify(body));
  }
  const names = (await http('GET', dir('/services'))).body.map((s: { name: string }) => s.name);
  t.notOk(names.includes('x1'));
  const notJson = await http('POST', dir('/services'), '{"name": ');
  t.equal(notJson.status, 400);
});

t.test('GET /services filters by containerImage, normalising the registry', async (t) => {
  await http('POST', dir('/services'), { name: 'hub', containerImage: 'nginx:1.25' });
  const filtered = await http('GET', dir('/services?containerImage=docker.io/library/nginx'));
  t.same(filtered.body.map((s: { name: string }) => s.name), ['hub']);
});

t.test('PATCH /services/:name/config is a JSON merge patch', async (t) => {
  t.equal((await http('PATCH', dir('/services/www/config'), { env: { A: '1', B: '2' } })).status, 200);
  const patched = await http('PATCH', dir('/services/www/config'), { env: { A: null, C: '3' }, numInstances: 2 });
  t.same(patched.body, { numInstances: 2, ports: [{ container: 8080, host: 80 }], env: { B: '2', C: '3' } });
  t.same((await http('GET', dir('/services/www/config'))).body, patched.body);
  t.equal((await http('PATCH', dir('/services/nope/config'), { numInstances: 1 })).status, 404);
  t.equal((await http('PATCH', dir('/services/www/config'), {})).status, 400);
});

t.test('PATCH /services/:name changes the declaration', async (t) => {
  const patched = await http('PATCH', dir('/services/www'), { description: 'new', autoDeploy: 'never' });
  t.match(patched.body, { description: 'new', autoDeploy: 'never', name: 'www' });
  t.equal((await http('PATCH', dir('/services/www'), { name: 'other' })).status, 400);
});

t.test('the orchestrator serves the seed endpoints through the directory', async (t) => {
  const created = await http('POST', orch('/services'), { name: 'shop', description: 'a shop', containerRepository: '127.0.0.1:5000/shop', loadBalanced: true, publicFacing: true });
  t.equal(created.status, 201);
  t.match(created.body.meta, { ok: true, name: 'shop' });
  const listed = await http('GET', orch('/services'));
  t.equal(listed.status, 200);
  t.match(listed.body.find((s: { name: string }) => s.name === 'shop'), { containerImage: '127.0.0.1:5000/shop', publicFacing: true });
  const patched = await http('PATCH', orch('/services/shop/config/next'), { env: { GREETING: 'hello' } });
  t.equal(patched.status, 200);
  t.same(patched.body.env, { GREETING: 'hello' });
  t.same((await http('GET', orch('/services/shop/config/next'))).body.env, { GREETING: 'hello' });
});

t.test("a peer's 4xx is relayed with its status and message", async (t) => {
  const duplicate = await http('POST', orch('/services'), { name: 'shop', containerRepository: 'x' });
  t.match(duplicate, { status: 409, body: { message: /shop already exists/ } });
  const invalid = await http('POST', orch('/services'), { name: 'x2', containerImage: 'x' });
  t.match(invalid, { status: 400, body: { message: /containerImage is not accepted here: this API names the image repository containerRepository/ } });
  t.match(await http('GET', orch('/services/nope')), { status: 404, body: { message: /nope is not declared/ } });
});

t.test('a scheduler that is not announced gives 503 naming it', async (t) => {
  const deploy = await http('POST', orch('/services/shop/deploy'), {});
  t.equal(deploy.status, 503);
  t.match(deploy.body.message, /scheduler is not announced/);
  const ready = await http('GET', orch('/readyz'));
  t.equal(ready.status, 503);
});

t.test('a directory that stops answering gives 503 naming it, never a 2xx', async (t) => {
  await directory.stop('SIGKILL');
  const listed = await http('GET', orch('/services'));
  t.equal(listed.status, 503);
  t.match(listed.body.message, /service-directory/);
});

t.test('a store that is down gives 503 naming the store', async (t) => {
  await etcd.stop();
  const units = await waitFor(async () => {
    const reply = await http('GET', orch('/cluster/units'));
    return reply.status === 503 ? reply : undefined;
  }, 15_000);
  t.match(units.body.message, /key-value store .* is unreachable/);
});
