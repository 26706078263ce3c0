import t from 'tap';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { releaseKey } from '../../src/store/keys.js';
import type { Release } from '../../src/schemas/release.js';
import type { Service } from '../../src/schemas/service.js';

// The audit trail on a real etcd, with the directory, scheduler and orchestrator as `platform
// serve` processes under --auth token, logging at debug: every change is journaled once, with
// the token's name and the client's address, env by variable names only; a read token sees env
// names with redacted values wherever env is served; no value reaches a journal line or a log.

const MARKER = 'marker-7f3a9c-value';

const etcd = await startEtcd();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3', '--auth', 'token'];
const debug = { PLATFORM_LOG_LEVEL: 'debug' };
const [directory, scheduler, orchestrator] = await Promise.all([
  serveRole('directory', await freePort(), flags, debug),
  serveRole('scheduler', await freePort(), flags, debug),
  serveRole('orchestrator', await freePort(), flags, debug),
]);
const roles = [directory!, scheduler!, orchestrator!];
const store = new EtcdStore([etcd.url]);
t.teardown(async () => {
  await Promise.all(roles.map((role) => role.stop()));
  await store.close();
  await etcd.stop();
});

const call = (method: string, url: string, token?: string, body?: unknown) => http(method, url, body, token ? { authorization: `Bearer ${token}` } : {});
const orch = (path: string) => `${orchestrator!.url}${path}`;
const secrets: Record<string, string> = {};

const journal = async (service?: string) => (await call('GET', orch(`/journal${service ? `?service=${service}` : ''}`), secrets.admin)).body as { kind: string; service?: string; message: string; actor?: Record<string, string> }[];

t.before(async () => {
  secrets.admin = (await call('POST', orch('/tokens/bootstrap'))).body.secret;
  // ci-b and ci-a are deploy tokens scoped to web-b and to web-a.
  for (const [name, role, services] of [['viewer', 'read'], ['ci', 'deploy'], ['ci-b', 'deploy', 'web-b'], ['ci-a', 'deploy', 'web-a']]) {
    const created = await call('POST', orch('/tokens'), secrets.admin, { name, role, ...(services ? { services } : {}) });
    secrets[name!] = created.body.secret;
  }
});

t.test('changes are journaled once, where they are made, with the token name and the address; env by names only', async (t) => {
  t.equal((await call('POST', orch('/services'), secrets.admin, { name: 'web-a', containerRepository: '127.0.0.1:5000/team/app', env: { FIRST: MARKER } })).status, 201);
  const patched = await call('PATCH', orch('/services/web-a/config/next'), secrets.ci, { env: { API_KEY: MARKER, FIRST: null } });
  t.equal(patched.status, 200);
  t.equal((await call('PATCH', orch('/services/web-a/config/next'), secrets.viewer, { env: { X: MARKER } })).status, 403);

  const lines = await journal('web-a');
  const declared = lines.filter((line) => line.kind === 'service.declared');
  t.equal(declared.length, 1, 'the orchestrator passed the declaration on and did not journal it too');
  t.match(declared[0], { service: 'web-a', message: 'POST /services: name; env FIRST set; containerImage', actor: { token: 'bootstrap', address: '127.0.0.1', forwardedFor: '127.0.0.1' } });
  const changed = lines.filter((line) => line.kind === 'config.changed');
  t.equal(changed.length, 1, 'the refused change is not journaled');
  t.match(changed[0], { service: 'web-a', message: 'PATCH /services/web-a/config: env API_KEY set, FIRST removed', actor: { token: 'ci', address: '127.0.0.1' } });

  const tokenLines = (await journal()).filter((line) => line.kind.startsWith('token.'));
  t.match(tokenLines.map((line) => [line.kind, line.message, line.actor?.token]), [
    ['token.created', 'POST /tokens: token ci-a (deploy, services web-a)', 'bootstrap'],
    ['token.created', 'POST /tokens: token ci-b (deploy, services web-b)', 'bootstrap'],
    ['token.created', 'POST /tokens: token ci (deploy)', 'bootstrap'],
    ['token.created', 'POST /tokens: token viewer (read)', 'bootstrap'],
    ['token.bootstrapped', 'POST /tokens/bootstrap', undefined],
  ]);
});

t.test("a read token and a deploy token scoped elsewhere see env names with values redacted; the service's deploy and admin tokens see values", async (t) => {
  const release: Release = {
    service: 'web-a',
    version: 1,
    image: '127.0.0.1:5000/team/app@sha256:' + 'a'.repeat(64),
    digest: 'sha256:' + 'a'.repeat(64),
    config: { numInstances: 1, ports: [], env: { API_KEY: MARKER } },
    pushedAt: 0,
    deployment: 'd-1',
    createdAt: new Date().toISOString(),
  };
  await store.put(releaseKey('web-a', 1), JSON.stringify(release));
  const served: [string, (body: any) => Record<string, string>][] = [
    [orch('/services/web-a'), (body) => body.config.env],
    [orch('/services'), (body) => body.find((s: Service) => s.name === 'web-a').config.env],
    [orch('/services/web-a/config/next'), (body) => body.env],
    [orch('/services/web-a/config/last'), (body) => body.config.env],
    [orch('/services/web-a/config/history'), (body) => body[0].config.env],
    [orch('/services/web-a/config/history/v1'), (body) => body.config.env],
    [`${directory!.url}/services/web-a/config`, (body) => body.env],
    [`${scheduler!.url}/services/web-a/releases`, (body) => body[0].config.env],
  ];
  for (const [url, env] of served) {
    const read = await call('GET', url, secrets.viewer);
    t.equal(read.status, 200, url);
    t.same(env(read.body), { API_KEY: '(redacted)' }, `${url} for a read token`);
    t.same(env((await call('GET', url, secrets['ci-b'])).body), { API_KEY: '(redacted)' }, `${url} for a deploy token scoped to another service`);
    t.same(env((await call('GET', url, secrets['ci-a'])).body), { API_KEY: MARKER }, `${url} for a deploy token scoped to the service`);
    t.same(env((await call('GET', url, secrets.ci)).body), { API_KEY: MARKER }, `${url} for a deploy token`);
    t.same(env((await call('GET', url, secrets.admin)).body), { API_KEY: MARKER }, `${url} for an admin token`);
  }
});

t.test("the event stream redacts env for a read token and a deploy token scoped to other services, in the snapshot and in each change", async (t) => {
  const streamOf = async (token: string) => {
    const controller = new AbortController();
    t.teardown(() => controller.abort());
    const response = await fetch(orch('/events'), { headers: { authorization: `Bearer ${token}` }, signal: controller.signal });
    const reader = response.body!.getReader();
    let text = '';
    /** The data of the next event of `kind`, read from where the last read stopped. */
    const next = async (kind: string) => {
      const pattern = new RegExp(`event: ${kind}\nid: \\d+\ndata: (.*)\n\n`);
      let match;
      while (!(match = pattern.exec(text))) text += new TextDecoder().decode((await reader.read()).value);
      text = text.slice(match.index + match[0].length);
      return JSON.parse(match[1]!);
    };
    return { snapshot: await next('snapshot'), next };
  };
  const streams = {
    viewer: await streamOf(secrets.viewer!),
    'ci-b': await streamOf(secrets['ci-b']!),
    'ci-a': await streamOf(secrets['ci-a']!),
    admin: await streamOf(secrets.admin!),
  };
  const sees = { viewer: { API_KEY: '(redacted)' }, 'ci-b': { API_KEY: '(redacted)' }, 'ci-a': { API_KEY: MARKER }, admin: { API_KEY: MARKER } };
  for (const [who, stream] of Object.entries(streams)) {
    t.same(stream.snapshot.services['web-a'].config.env, sees[who as keyof typeof sees], `${who}: the snapshot`);
  }
  t.equal((await call('PATCH', orch('/services/web-a/config/next'), secrets.admin, { env: { ROUND: MARKER } })).status, 200);
  const seesAfter = { viewer: { API_KEY: '(redacted)', ROUND: '(redacted)' }, 'ci-b': { API_KEY: '(redacted)', ROUND: '(redacted)' } };
  for (const [who, stream] of Object.entries(streams)) {
    const change = await stream.next('service');
    t.same(change.value.config.env, seesAfter[who as keyof typeof seesAfter] ?? { API_KEY: MARKER, ROUND: MARKER }, `${who}: a change`);
  }
});

t.test('no env value reaches the journal or any role\'s output', async (t) => {
  t.notOk(JSON.stringify(await journal()).includes(MARKER), 'not in the journal');
  for (const role of roles) t.notOk(role.output().includes(MARKER), 'not in the output');
  for (const secret of Object.values(secrets)) for (const role of roles) t.notOk(role.output().includes(secret.slice(4)), 'no token either');
});

t.test('under --auth auto a local call without a token is journaled as local', async (t) => {
  const auto = await serveRole('directory', await freePort(), ['--etcd', etcd.url, '--announce-ttl', '3']);
  t.teardown(() => auto.stop());
  t.equal((await call('PATCH', `${auto.url}/services/web-a/config`, undefined, { numInstances: 2 })).status, 200);
  const [line] = (await journal('web-a')).filter((entry) => entry.kind === 'config.changed');
  t.match(line, { message: 'PATCH /services/web-a/config: numInstances', actor: { token: 'local', address: '127.0.0.1' } });
  t.notOk(line?.actor && 'forwardedFor' in line.actor);
});
