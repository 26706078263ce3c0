import t, { type Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRoleServer, type RoleServer } from '../../src/http/server.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { PrefixCache } from '../../src/store/prefix-cache.js';
import { quotaPrefix, servicePrefix } from '../../src/store/keys.js';
import { directoryRoutes } from '../../src/roles/directory/routes.js';
import { orchestratorApi } from '../../src/schemas/api.js';
import { splitRouteKey, type RouteKey } from '../../src/schemas/route-key.js';
import { StoreSpace } from '../../src/store/store-space.js';
import { WriteBudget } from '../../src/auth/write-budget.js';

// No declaration can ask for privileged mode, host paths, host namespaces or capabilities: every
// body a client sends is a closed schema, so such a field is a 400 that names it, at the directory
// and at the orchestrator alike.

const smuggled: Record<string, unknown>[] = [
  { privileged: true },
  { binds: ['/:/host'] },
  { pidMode: 'host' },
  { ipcMode: 'host' },
  { capAdd: ['SYS_ADMIN'] },
  { securityOpt: ['seccomp=unconfined'] },
  { devices: ['/dev/kvm'] },
  { hostConfig: { Privileged: true } },
];
const fieldOf = (body: Record<string, unknown>) => Object.keys(body)[0]!;

const dir = mkdtempSync(join(tmpdir(), 'declaration-privileges-'));
const store = await EmbeddedStore.open(dir);
const services = await PrefixCache.start(store, servicePrefix);
const quotas = await PrefixCache.start(store, quotaPrefix);
const newServer = () => createRoleServer({ role: 'directory', logger: false, access: { mode: 'none', listenerLoopback: true }, readiness: async () => ({}) });
const directory = await newServer();
const space = new StoreSpace(store);
directoryRoutes(directory, store, services, { space, budget: new WriteBudget() }, { quotas, defaultUnitMemoryMB: undefined });
t.teardown(async () => {
  space.close();
  await directory.close();
  services.close();
  await quotas.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

async function expectRefused(t: Test, server: RoleServer, method: 'POST' | 'PATCH' | 'PUT', url: string, body: Record<string, unknown>, field: string): Promise<void> {
  const reply = await server.inject({ method, url, payload: body });
  t.equal(reply.statusCode, 400, `${method} ${url} with ${field}`);
  t.match(reply.json(), { statusCode: 400, message: `${field} is not a known field of body` });
}

t.test('the directory refuses a declaration, a declaration patch or a config patch that asks for privileges', async (t) => {
  const created = await directory.inject({ method: 'POST', url: '/services', payload: { name: 'shop', containerImage: 'registry.example/shop' } });
  t.equal(created.statusCode, 201);
  for (const extra of smuggled) {
    const field = fieldOf(extra);
    await expectRefused(t, directory, 'POST', '/services', { name: 'other', containerImage: 'registry.example/shop', ...extra }, field);
    await expectRefused(t, directory, 'PATCH', '/services/shop', { description: 'x', ...extra }, field);
    await expectRefused(t, directory, 'PATCH', '/services/shop/config', { numInstances: 2, ...extra }, field);
  }
  const nested = await directory.inject({ method: 'PATCH', url: '/services/shop/config', payload: { ports: [{ container: 80, hostIp: '0.0.0.0', privileged: true }] } });
  t.equal(nested.statusCode, 400);
  t.match(nested.json().message, /^ports\.0\.(hostIp|privileged) is not a known field of ports\.0$/, 'a port mapping is closed too');
  t.same((await directory.inject({ method: 'GET', url: '/services/shop/config' })).json(), { numInstances: 1, ports: [], env: {} }, 'nothing was stored');
});

/** A body each orchestrator route accepts: the smuggled field is the only thing wrong with it. */
const acceptedBodies: Record<string, Record<string, unknown>> = {
  'POST /services': { name: 'shop', containerRepository: 'registry.example/shop' },
  'PATCH /services/:name/config/next': { numInstances: 2 },
  'POST /services/:name/deploy': {},
  'POST /services/:name/rollback': { version: 1 },
  'POST /services/:name/jobs': { command: ['sh', '-c', 'true'] },
  'PUT /cluster/machines/:id/drain': {},
  'POST /tokens': { name: 'ci', role: 'read' },
  'POST /session': { token: 'plt_x' },
  'PUT /registries/:host': { username: 'ci', password: 'secret' },
  'PUT /quotas/:services': { units: 4 },
  'POST /notifications/endpoints': { url: 'https://hooks.example.com/deploys' },
  'POST /certificates': { host: 'shop.example.com', certificate: 'PEM', key: 'PEM' },
};

t.test('every body the orchestrator accepts refuses a field that asks for privileges', async (t) => {
  const orchestrator = await newServer();
  t.teardown(() => orchestrator.close());
  const withBody = Object.entries(orchestratorApi).flatMap(([key, schema]) => ('body' in schema && schema.body ? [{ key, body: schema.body }] : []));
  t.same(withBody.map(({ key }) => key).sort(), Object.keys(acceptedBodies).sort(), 'every route that takes a body is checked');
  for (const { key, body } of withBody) {
    const { method, url } = splitRouteKey(key as RouteKey);
    orchestrator.route({ method, url, schema: { body }, handler: async () => ({ accepted: true }) });
  }
  for (const { key } of withBody) {
    const { method, url } = splitRouteKey(key as RouteKey);
    const path = url.replace(':name', 'shop').replace(':id', 'm1');
    t.equal((await orchestrator.inject({ method, url: path, payload: acceptedBodies[key] })).statusCode, 200, `${key} accepts the body alone`);
    for (const extra of smuggled) await expectRefused(t, orchestrator, method as 'POST' | 'PATCH' | 'PUT', path, { ...acceptedBodies[key], ...extra }, fieldOf(extra));
  }
});
