import t from 'tap';
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { request } from 'undici';
import { startEtcd } from '../harness/etcd.js';
import { startRegistry } from '../harness/registry.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { releasePrefix } from '../../src/store/keys.js';
import { RegistryClient } from '../../src/roles/scheduler/deploys/registry-client.js';
import { parseImageReference } from '../../src/image-reference.js';

// SSRF through the registry client, reproduced as the audit did: a declaration names an
// attacker's registry whose token challenge points at an internal URL. The scheduler must not
// fetch it, nor echo any body, nor contact loopback registries it was not told about. A real
// registry (holding an image pushed through its API) stays usable when named.

const SECRET = 'internal-secret-7c1e';

/** A small HTTP server on 127.0.0.1 that records the paths it was asked for. */
async function listen(handle: (request: IncomingMessage, response: ServerResponse) => void): Promise<{ port: number; hits: string[]; server: Server }> {
  const hits: string[] = [];
  const server = createServer((request, response) => {
    hits.push(`${request.method} ${request.url}`);
    handle(request, response);
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return { port, hits, server };
}

// The internal service the attacker wants read: it answers with a secret, as a metadata endpoint would.
const internal = await listen((_request, response) => response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token: SECRET })));
const internalUrl = `http://127.0.0.1:${internal.port}/latest/meta-data`;

// The attacker's registry: every manifest needs a token from whatever realm the path chooses.
const realms: Record<string, string> = {
  'plain-internal': internalUrl,
  'https-internal': `https://127.0.0.1:${internal.port}/latest/meta-data`,
};
let attackerPort = 0;
const attacker = await listen((request, response) => {
  const url = new URL(request.url ?? '/', 'http://attacker');
  if (url.pathname === '/token') return void response.writeHead(200).end(`not json: ${SECRET}`);
  if (url.pathname.startsWith('/v2/echo/')) return void response.writeHead(502, { 'content-type': 'text/plain' }).end(SECRET);
  const repository = url.pathname.split('/')[2] ?? '';
  const realm = realms[repository] ?? `http://127.0.0.1:${attackerPort}/token`;
  response.writeHead(401, { 'www-authenticate': `Bearer realm="${realm}",service="registry",scope="repository:x:pull"` }).end(SECRET);
});
attackerPort = attacker.port;
const attackerHost = `127.0.0.1:${attacker.port}`;

const registry = await startRegistry();
const etcd = await startEtcd();
const flags = ['--etcd', etcd.url];
const directory = await serveRole('directory', await freePort(), flags);
// Named explicitly: the harness's default (any port on 127.0.0.1) would allow the internal server too.
const scheduler = await serveRole('scheduler', await freePort(), [...flags, '--allowed-registry', registry.host, '--allowed-registry', attackerHost], { PLATFORM_ALLOWED_REGISTRIES: '' });
const store = new EtcdStore([etcd.url]);
t.teardown(async () => {
  await store.close();
  await Promise.all([directory.stop(), scheduler.stop()]);
  await Promise.all([etcd.stop(), registry.stop()]);
  for (const { server } of [internal, attacker]) server.close();
});

/** Pushes a config blob and an image manifest through the Registry API; returns the manifest digest. */
async function pushImage(repository: string, tag: string): Promise<string> {
  const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: [] } }));
  const sha = (data: Buffer) => `sha256:${createHash('sha256').update(data).digest('hex')}`;
  const upload = await request(`http://${registry.host}/v2/${repository}/blobs/uploads/`, { method: 'POST' });
  await upload.body.dump();
  const location = new URL(String(upload.headers.location), `http://${registry.host}`);
  location.searchParams.set('digest', sha(config));
  const blob = await request(location, { method: 'PUT', body: config, headers: { 'content-type': 'application/octet-stream' } });
  await blob.body.dump();
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha(config), size: config.length },
      layers: [],
    }),
  );
  const put = await request(`http://${registry.host}/v2/${repository}/manifests/${tag}`, { method: 'PUT', body: manifest, headers: { 'content-type': 'application/vnd.oci.image.manifest.v1+json' } });
  await put.body.dump();
  if (put.statusCode !== 201) throw new Error(`manifest push answered ${put.statusCode}`);
  return sha(manifest);
}

async function declare(name: string, containerImage: string): Promise<void> {
  const created = await http('POST', `${directory.url}/services`, { name, containerImage });
  if (created.status !== 201) throw new Error(`declaring ${name}: ${created.status} ${JSON.stringify(created.body)}`);
}

const deploy = (serviceName: string, containerRepository: string) => http('POST', `${scheduler.url}/hooks/deploy`, { serviceName, containerRepository, pushedAt: 0 });
const releases = async (name: string) => (await store.list(releasePrefix(name))).length;

t.test("the audit's registry: a realm on an internal plain-HTTP URL is refused, not fetched, and nothing is echoed", async (t) => {
  await declare('plain-internal', `${attackerHost}/plain-internal:v1`);
  const reply = await deploy('plain-internal', `${attackerHost}/plain-internal:v1`);
  t.equal(reply.status, 502);
  t.match(reply.body.message, `registry ${attackerHost} named the token realm http://127.0.0.1:${internal.port}, refused: a realm must use HTTPS or be on the registry's own host and port`);
  t.notMatch(JSON.stringify(reply.body), SECRET);
  t.same(internal.hits, [], 'the internal URL was never requested');
  t.equal(await releases('plain-internal'), 0, 'no release');
});

t.test('an HTTPS realm on a loopback address the operator did not name is refused before connecting', async (t) => {
  await declare('https-internal', `${attackerHost}/https-internal:v1`);
  const reply = await deploy('https-internal', `${attackerHost}/https-internal:v1`);
  t.equal(reply.status, 502);
  t.match(reply.body.message, /refused: 127\.0\.0\.1 is a loopback address; the scheduler contacts loopback, private, link-local and unspecified addresses only for registries named with --allowed-registry/);
  t.same(internal.hits, []);
});

t.test('a realm on the registry itself is fetched, and what it answers is never quoted', async (t) => {
  await declare('own-realm', `${attackerHost}/own-realm:v1`);
  const reply = await deploy('own-realm', `${attackerHost}/own-realm:v1`);
  t.equal(reply.status, 502);
  t.equal(reply.body.message, `the token realm http://${attackerHost} of registry ${attackerHost} answered no token`);
  t.ok(attacker.hits.some((hit) => hit.startsWith('GET /token?')), 'the realm was asked');
  t.notMatch(JSON.stringify(reply.body), SECRET);
});

t.test('a registry error is reported by registry and status, without its body', async (t) => {
  await declare('echo', `${attackerHost}/echo:v1`);
  const reply = await deploy('echo', `${attackerHost}/echo:v1`);
  t.equal(reply.status, 502);
  t.equal(reply.body.message, `registry ${attackerHost} answered 502 for echo:v1`);
});

t.test('a loopback registry the operator did not name is refused with 400, by address or by a name resolving to it', async (t) => {
  for (const host of [`127.0.0.1:${internal.port}`, `localhost:${internal.port}`]) {
    const name = host.startsWith('localhost') ? 'by-name' : 'by-address';
    await declare(name, `${host}/app:v1`);
    const reply = await deploy(name, `${host}/app:v1`);
    t.equal(reply.status, 400, host);
    t.match(reply.body.message, `containerRepository: registry ${host} is not allowed: `);
    t.match(reply.body.message, /loopback/);
    t.match(reply.body.message, /only for registries named with --allowed-registry/);
    t.equal(await releases(name), 0);
  }
  t.same(internal.hits, [], 'the internal server was never contacted');
});

t.test('a named registry on loopback deploys', async (t) => {
  const digest = await pushImage('team/app', 'v1');
  await declare('allowed', `${registry.host}/team/app:v1`);
  const reply = await deploy('allowed', `${registry.host}/team/app:v1`);
  t.equal(reply.status, 200, JSON.stringify(reply.body));
  t.match(reply.body, { outcome: 'created', version: 1 });
  t.equal(JSON.parse((await store.list(releasePrefix('allowed')))[0]!.value).digest, digest, 'the release pins the pushed digest');
  t.equal(await releases('allowed'), 1);
});

t.test('the client alone: ranges and names in the allow list', async (t) => {
  const image = parseImageReference(`localhost:${internal.port}/app:v1`);
  const byRange = new RegistryClient({ allowedRegistries: ['127.0.0.0/8', '::1/128'], timeoutMs: 2000 });
  t.teardown(() => byRange.close());
  // The internal server is no registry: it answers 200 without a digest, which is a 502, but it was reached.
  await t.rejects(byRange.resolveDigest(image), { statusCode: 502, message: `registry localhost:${internal.port} answered 200 for app:v1` });
  const other = new RegistryClient({ allowedRegistries: ['10.0.0.0/8', `localhost:${internal.port + 1}`], timeoutMs: 2000 });
  t.teardown(() => other.close());
  await t.rejects(other.resolveDigest(image), { statusCode: 400, message: /resolves only to addresses not allowed: .*loopback/ });
  const decimal = parseImageReference(`2130706433:${internal.port}/app:v1`);
  await t.rejects(other.resolveDigest(decimal), { statusCode: 400, message: `containerRepository: registry 2130706433:${internal.port} is not allowed: 127.0.0.1 is a loopback address` }, 'another spelling of 127.0.0.1');
  t.same(internal.hits.filter((hit) => !hit.startsWith('HEAD /v2/app/')), [], 'only the allowed client reached the internal server');
});
