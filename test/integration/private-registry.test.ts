import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, copyFileSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { X509Certificate, createPrivateKey, randomBytes, sign } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { makeTlsCertificates } from '../harness/tls-certificates.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, platformBin, serveRole, waitHealthy } from '../harness/platform.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { ROOT } from '../../src/store/keys.js';
import { waitFor } from '../harness/wait.js';
import { RegistryClient } from '../../src/roles/scheduler/deploys/registry-client.js';
import { parseImageReference } from '../../src/image-reference.js';

// Private registries with real parts: Debian's docker-registry behind htpasswd (bcrypt) and TLS
// from a test CA, which the test engine trusts through /etc/docker/certs.d/<host:port>/ca.crt and
// the scheduler through NODE_EXTRA_CA_CERTS. A deploy fails with the registry's 401 before a
// login and with a wrong password, and works after `platform registry login`: the scheduler
// resolves the tag with the login and the agent pulls with it (the engine holds no copy). The
// password is answered, listed and journaled nowhere, and stored once. Then the bearer flow: a
// second docker-registry serving the same storage with token auth, whose token realm (this test's
// HTTPS endpoint, issuing Distribution's ES256 tokens) takes the login as Basic credentials.

let tokenServer: Server | undefined;
let tokenRegistry: Awaited<ReturnType<typeof startRegistry>> | undefined;
const USER = 'deployer';
const PASSWORD = `pw-${randomBytes(12).toString('hex')}`;

const certDir = mkdtempSync(join(tmpdir(), 'platform-registry-tls-'));
const certs = makeTlsCertificates(certDir);
const registry = await startRegistry({ tls: { cert: certs.serverCert, key: certs.serverKey, ca: certs.ca }, users: { [USER]: PASSWORD } });
// Docker reads a registry's CA from here (one directory per host:port, so this one is this test's own).
const engineTrust = join('/etc/docker/certs.d', registry.host);
mkdirSync(engineTrust, { recursive: true });
copyFileSync(certs.ca, join(engineTrust, 'ca.crt'));
const engine = await startDockerd();
const etcd = await startEtcd();
const store = new EtcdStore([etcd.url]);
t.teardown(async () => {
  tokenServer?.close();
  await tokenRegistry?.stop();
  await Promise.all(roles.map((role) => role.stop()));
  await store.close();
  await engine.stop();
  await registry.stop();
  await etcd.stop();
  rmSync(engineTrust, { recursive: true, force: true });
  rmSync(certDir, { recursive: true, force: true });
});

const repository = `private/web-${randomBytes(3).toString('hex')}`;
const image = await buildTestImage(engine.docker, registry.host, repository, 'v1', { auth: { username: USER, password: PASSWORD } });
// The agent must pull it, with the login: the engine keeps no copy of what was pushed.
await engine.docker.getImage(image.reference).remove();

const flags = ['--etcd', etcd.url, '--announce-ttl', '3', '--auth', 'token'];
const roles = await Promise.all([
  serveRole('directory', await freePort(), flags),
  serveRole('scheduler', await freePort(), flags, { NODE_EXTRA_CA_CERTS: certs.ca }),
  serveRole('orchestrator', await freePort(), flags),
  serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', `private-${randomBytes(2).toString('hex')}`, '--stop-grace', '1'], {
    DOCKER_HOST: engine.dockerHost,
  }),
]);
const orchestrator = roles[2]!;
// Deploys need the scheduler announced: the orchestrator is ready once its peers answer.
await waitHealthy(orchestrator.url, orchestrator, 60_000, '/readyz');

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** `platform <args>` with `token`, `input` on its standard input, to completion. */
const platform = (token: string, input: string, ...args: string[]): Promise<Run> =>
  new Promise((resolve) => {
    const child = spawn(process.execPath, [platformBin, ...args], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url, PLATFORM_TOKEN: token } });
    let [stdout, stderr] = ['', ''];
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
    child.stdin.end(input);
  });

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const admin = (await http('POST', `${orchestrator.url}/tokens/bootstrap`)).body.secret as string;
const reader = (await http('POST', `${orchestrator.url}/tokens`, { name: 'viewer', role: 'read' }, bearer(admin))).body.secret as string;
const hostPath = `${orchestrator.url}/registries/${encodeURIComponent(registry.host)}`;

t.test('a service in the private registry is declared', async (t) => {
  const created = await http('POST', `${orchestrator.url}/services`, {
    name: 'private-web',
    description: '',
    containerRepository: `${registry.host}/${repository}`,
    loadBalanced: true,
    publicFacing: false,
    numInstances: 1,
    ports: [],
    env: {},
  }, bearer(admin));
  t.equal(created.status, 201, JSON.stringify(created.body));
});

t.test('before any login a deploy fails with the registry\'s 401 and its reason', async (t) => {
  const deploy = await platform(admin, '', 'deploy', 'private-web', '--image', image.reference);
  t.not(deploy.code, 0);
  t.match(deploy.stderr, `400: 401 from ${registry.host}: authentication required (no login for ${registry.host}: platform registry login ${registry.host})`);
});

t.test('a scheduler that does not trust the registry\'s CA says so, and how to give it', async (t) => {
  // This test process was started without NODE_EXTRA_CA_CERTS, so its client trusts only the system's CAs.
  const client = new RegistryClient({ allowedRegistries: ['127.0.0.1'] });
  t.teardown(() => client.close());
  await t.rejects(client.resolveDigest(parseImageReference(image.reference)), {
    statusCode: 502,
    message: `registry ${registry.host} presented a certificate the scheduler does not trust (UNABLE_TO_VERIFY_LEAF_SIGNATURE): give the scheduler its CA with NODE_EXTRA_CA_CERTS`,
  });
});

t.test('registry logins are an admin\'s: a read token and no token are refused, a bad host is named', async (t) => {
  for (const [token, status] of [[reader, 403], ['', 401]] as const) {
    const headers = token ? bearer(token) : {};
    t.equal((await http('PUT', hostPath, { username: USER, password: PASSWORD }, headers)).status, status, `login with ${token ? 'a read token' : 'no token'}`);
    t.equal((await http('GET', `${orchestrator.url}/registries`, undefined, headers)).status, status, `list with ${token ? 'a read token' : 'no token'}`);
    t.equal((await http('DELETE', hostPath, undefined, headers)).status, status);
  }
  const badHost = await http('PUT', `${orchestrator.url}/registries/Bad_Host`, { username: USER, password: PASSWORD }, bearer(admin));
  t.equal(badHost.status, 400);
  t.match(badHost.body.message, /host must be a registry host as image references name it/);
  const word = await http('PUT', `${orchestrator.url}/registries/myhost`, { username: USER, password: PASSWORD }, bearer(admin));
  t.equal(word.status, 400);
  t.match(word.body.message, /host: myhost is not read as a registry/);
  const colon = await http('PUT', hostPath, { username: 'a:b', password: PASSWORD }, bearer(admin));
  t.equal(colon.status, 400);
  t.match(colon.body.message, /username must be/);
  t.same((await http('GET', `${orchestrator.url}/registries`, undefined, bearer(admin))).body, [], 'nothing was stored');
});

t.test('with a wrong password the deploy fails with the registry\'s 401, naming the refused user', async (t) => {
  const login = await platform(admin, 'wrong-password\n', 'registry', 'login', registry.host, '--username', USER, '--password-stdin');
  t.equal(login.code, 0, login.stderr);
  t.equal(login.stdout, `logged in to ${registry.host} as ${USER}\n`);
  const deploy = await platform(admin, '', 'deploy', 'private-web', '--image', image.reference);
  t.not(deploy.code, 0);
  t.match(deploy.stderr, `401 from ${registry.host}: authentication required (the login of user ${USER} was refused`);
});

t.test('after login with the right password the deploy resolves, pulls with the login and runs', async (t) => {
  const login = await platform(admin, `${PASSWORD}\n`, 'registry', 'login', registry.host, '--username', USER, '--password-stdin');
  t.equal(login.code, 0, login.stderr);
  const deploy = await platform(admin, '', 'deploy', 'private-web', '--image', image.reference);
  t.equal(deploy.code, 0, deploy.stderr);
  t.match(deploy.stdout, /succeeded: private-web v1 runs 1 of 1 units/);
  const pulled = await engine.docker.getImage(`${registry.host}/${repository}@${image.digest}`).inspect();
  t.ok(pulled.Id, 'the agent pulled the image by digest from the private registry');
});

t.test('the password is answered, listed and journaled nowhere, and stored once', async (t) => {
  const list = await platform(admin, '', 'registry', 'list');
  t.equal(list.code, 0, list.stderr);
  t.match(list.stdout, new RegExp(`^REGISTRY +USERNAME +ADDED\\n${registry.host.replace(/\./g, '\\.')} +${USER} +\\d{4}-`));
  const listed = await http('GET', `${orchestrator.url}/registries`, undefined, bearer(admin));
  t.match(listed.body, [{ host: registry.host, username: USER, addedAt: String }]);
  t.same(Object.keys(listed.body[0]).sort(), ['addedAt', 'host', 'username']);
  const journal = await http('GET', `${orchestrator.url}/journal?limit=500`, undefined, bearer(admin));
  const logins = (journal.body as { kind: string; message: string; actor?: { token?: string } }[]).filter((entry) => entry.kind === 'registry.login');
  t.equal(logins.length, 2, 'both logins are journaled');
  t.match(logins[0], { message: `PUT /registries/${encodeURIComponent(registry.host)}: user ${USER}`, actor: { token: 'bootstrap' } });
  const everything = await store.list(ROOT);
  const holding = everything.filter((kv) => kv.value.includes(PASSWORD)).map((kv) => kv.key);
  t.same(holding, [`${ROOT}registry-credentials/${registry.host}`], 'one key of the whole store holds the password');
  t.notOk(JSON.stringify(journal.body).includes('wrong-password'), 'nor the wrong one');
  for (const role of roles) t.notOk(role.output().includes(PASSWORD), 'no role printed it');
});

t.test('after logout the registry is reached without a login again', async (t) => {
  const logout = await platform(admin, '', 'registry', 'logout', registry.host);
  t.equal(logout.code, 0, logout.stderr);
  t.same((await http('GET', `${orchestrator.url}/registries`, undefined, bearer(admin))).body, []);
  t.equal((await http('DELETE', hostPath, undefined, bearer(admin))).status, 404, 'a second logout finds none');
  const deploy = await http('POST', `${orchestrator.url}/services/private-web/deploy`, { containerRepository: image.reference }, bearer(admin));
  t.equal(deploy.status, 400);
  t.match(deploy.body.message, `401 from ${registry.host}: authentication required (no login`);
});

/**
 * A token realm as Distribution's token auth expects one: Basic credentials in, an ES256 JWT out
 * (signed with the key of `certs.otherCa`, which the registry's rootcertbundle holds, the
 * certificate in its `x5c`), granting pull on the scope asked for; 401 with a reason otherwise.
 */
async function startTokenRealm(service: string, issuer: string): Promise<{ server: Server; realm: string }> {
  const key = createPrivateKey(readFileSync(certs.otherCaKey));
  const x5c = [new X509Certificate(readFileSync(certs.otherCa)).raw.toString('base64')];
  const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const server = createServer({ cert: readFileSync(certs.serverCert), key: readFileSync(certs.serverKey) }, (request, response) => {
    const url = new URL(request.url ?? '/', 'https://realm');
    const expected = `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`;
    if (request.headers.authorization !== expected) {
      return void response.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ details: 'incorrect username or password' }));
    }
    const [, name] = (url.searchParams.get('scope') ?? '').split(':');
    const now = Math.floor(Date.now() / 1000);
    const claims = { iss: issuer, sub: USER, aud: service, exp: now + 300, nbf: now - 10, iat: now, jti: randomBytes(8).toString('hex'), access: [{ type: 'repository', name, actions: ['pull'] }] };
    const unsigned = `${part({ alg: 'ES256', typ: 'JWT', x5c })}.${part(claims)}`;
    const signature = sign('sha256', Buffer.from(unsigned), { key, dsaEncoding: 'ieee-p1363' }).toString('base64url');
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token: `${unsigned}.${signature}` }));
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return { server, realm: `https://127.0.0.1:${port}/token` };
}

t.test('with token auth the scheduler asks the realm for a token with the login, and names the realm that refused', async (t) => {
  const realm = await startTokenRealm('platform-test-registry', 'platform-test-issuer');
  tokenServer = realm.server;
  tokenRegistry = await startRegistry({
    tls: { cert: certs.serverCert, key: certs.serverKey, ca: certs.ca },
    tokenAuth: { realm: realm.realm, service: 'platform-test-registry', issuer: 'platform-test-issuer', rootCertBundle: certs.otherCa },
    storageDir: registry.storageDir,
  });
  const origin = new URL(realm.realm).origin;
  const declared = await http('PATCH', `${roles[0]!.url}/services/private-web`, { containerImage: `${tokenRegistry.host}/${repository}` }, bearer(admin));
  t.equal(declared.status, 200, JSON.stringify(declared.body));
  // A new digest (pushed to the first registry, served by both), so the deploy is not `unchanged`.
  const v2 = await buildTestImage(engine.docker, registry.host, repository, 'v2', { label: 'two', auth: { username: USER, password: PASSWORD } });
  const reference = `${tokenRegistry.host}/${repository}:v2`;

  const anonymous = await http('POST', `${orchestrator.url}/services/private-web/deploy`, { containerRepository: reference }, bearer(admin));
  t.equal(anonymous.status, 400);
  t.equal(anonymous.body.message, `401 from the token realm ${origin} of registry ${tokenRegistry.host}: incorrect username or password (no login for ${tokenRegistry.host}: platform registry login ${tokenRegistry.host})`);

  await platform(admin, 'wrong-password\n', 'registry', 'login', tokenRegistry.host, '--username', USER, '--password-stdin');
  const wrong = await http('POST', `${orchestrator.url}/services/private-web/deploy`, { containerRepository: reference }, bearer(admin));
  t.equal(wrong.status, 400);
  t.match(wrong.body.message, `401 from the token realm ${origin} of registry ${tokenRegistry.host}: incorrect username or password (the login of user ${USER} was refused`);

  await platform(admin, `${PASSWORD}\n`, 'registry', 'login', tokenRegistry.host, '--username', USER, '--password-stdin');
  const deploy = await http('POST', `${orchestrator.url}/services/private-web/deploy`, { containerRepository: reference }, bearer(admin));
  t.equal(deploy.status, 200, JSON.stringify(deploy.body));
  t.match(deploy.body, { outcome: 'created', image: `${tokenRegistry.host}/${repository}@${v2.digest}` }, 'the tag resolved to the pushed digest through the token');
  const finished = await waitFor(async () => {
    const record = (await http('GET', `${orchestrator.url}/deployments/${deploy.body.deployment}`, undefined, bearer(admin))).body as { state: string; reason?: string };
    return ['pending', 'pulling', 'rolling'].includes(record.state) ? undefined : record;
  }, 120_000, { what: 'the deployment to end' });
  t.match(finished, { state: 'succeeded' }, 'and the agent pulled it through the token flow, with the login');
});
