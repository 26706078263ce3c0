import t from 'tap';
import { createHmac } from 'node:crypto';
import { registryPushes } from '../../src/roles/scheduler/webhooks/registry-hook.js';
import { dockerHubPush } from '../../src/roles/scheduler/webhooks/dockerhub-hook.js';
import { gitHubPush } from '../../src/roles/scheduler/webhooks/github-hook.js';
import { describeImage, matchPush, pushedRepository, type Push } from '../../src/roles/scheduler/webhooks/matching.js';
import { githubSignatureValid, secretMatches } from '../../src/roles/scheduler/webhooks/auth.js';
import { bearerToken, isLoopback } from '../../src/auth/caller.js';
import { HttpError } from '../../src/http/errors.js';

// Payload parsing, repository matching and secret checks of the registry webhooks: pure logic.

const digest = (c: string) => `sha256:${c.repeat(64)}`;

/** The shape docker-registry 2.8 sends (captured from a real push). */
const manifestPush = (overrides: Record<string, unknown> = {}) => ({
  id: '8e328c1a-fb1c-418e-87a4-fd491de802f2',
  timestamp: '2026-11-22T03:24:21.471300645Z',
  action: 'push',
  target: {
    mediaType: 'application/vnd.docker.distribution.manifest.v2+json',
    size: 528,
    digest: digest('a'),
    length: 528,
    repository: 'team/app',
    url: `http://127.0.0.1:41875/v2/team/app/manifests/${digest('a')}`,
    tag: 'v1',
  },
  request: { id: 'r1', addr: '127.0.0.1:38454', host: '127.0.0.1:41875', method: 'PUT', useragent: 'docker/20.10.24' },
  actor: {},
  source: { addr: 'vm:41875', instanceID: 'i1' },
  ...overrides,
});
const blobPush = {
  id: 'e38962ee',
  timestamp: '2026-11-22T03:24:21.39281538Z',
  action: 'push',
  target: { mediaType: 'application/octet-stream', digest: digest('b'), repository: 'team/app', url: `http://127.0.0.1:41875/v2/team/app/blobs/${digest('b')}` },
  request: { host: '127.0.0.1:41875' },
};

const errorOf = (fn: () => unknown): HttpError => {
  try {
    fn();
  } catch (error) {
    if (error instanceof HttpError) return error;
    throw error;
  }
  throw new Error('expected an HttpError');
};

t.test('a registry envelope yields its manifest pushes; blob pushes and pulls are ignored', async (t) => {
  const pull = { ...manifestPush(), id: 'p1', action: 'pull' };
  const { pushes, ignored } = registryPushes({ events: [blobPush, pull, manifestPush()] } as never);
  t.equal(ignored, 2);
  t.same(pushes, [
    {
      hook: 'registry',
      event: '8e328c1a-fb1c-418e-87a4-fd491de802f2',
      image: { registry: '127.0.0.1:41875', repository: 'team/app', tag: 'v1', digest: digest('a') },
      pushedAt: Math.floor(Date.parse('2026-11-22T03:24:21Z') / 1000),
    },
  ]);
});

t.test('a registry push without request.host takes the host from the target URL; an untagged push has no tag', async (t) => {
  const event = manifestPush({ request: {} });
  delete (event.target as { tag?: string }).tag;
  const [push] = registryPushes({ events: [event] } as never).pushes;
  t.same(push?.image, { registry: '127.0.0.1:41875', repository: 'team/app', digest: digest('a') });
});

t.test('a malformed manifest push is a 400 naming the field', async (t) => {
  const noDigest = manifestPush({ target: { ...manifestPush().target, digest: 'md5:xyz' } });
  t.match(errorOf(() => registryPushes({ events: [blobPush, noDigest] } as never)), { statusCode: 400, message: /events\.1\.target\.digest must be a digest/ });
  const noRepository = manifestPush({ target: { ...manifestPush().target, repository: undefined } });
  t.match(errorOf(() => registryPushes({ events: [noRepository] } as never)), { statusCode: 400, message: /events\.0\.target\.repository is required/ });
});

t.test('Docker Hub payloads name docker.io repositories with the implicit library/ prefix', async (t) => {
  const push = dockerHubPush({ callback_url: 'https://registry.hub.docker.com/u/x/y/hook/1/', push_data: { tag: 'latest', pushed_at: 1417566161 }, repository: { repo_name: 'svendowideit/testhook' } });
  t.same(push, { hook: 'dockerhub', event: 'svendowideit/testhook:latest@1417566161', image: { registry: 'docker.io', repository: 'svendowideit/testhook', tag: 'latest' }, pushedAt: 1417566161 });
  t.equal(describeImage(push.image), 'docker.io/svendowideit/testhook:latest');
  const official = dockerHubPush({ push_data: { tag: '1.25' }, repository: { repo_name: 'nginx' } });
  t.same(official.image, { registry: 'docker.io', repository: 'library/nginx', tag: '1.25' });
  t.equal(official.event, undefined, 'no push time: not deduplicated on an id');
  t.equal(official.pushedAt, 0);
});

/** GitHub's package event for a GHCR push (abridged from a real delivery). */
const githubPackage = (overrides: Record<string, unknown> = {}) => ({
  action: 'published',
  package: {
    id: 9056324,
    name: 'www',
    namespace: 'TheOwner',
    package_type: 'CONTAINER',
    updated_at: '2025-11-03T13:50:26Z',
    owner: { login: 'TheOwner' },
    package_version: {
      version: digest('c'),
      name: digest('c'),
      created_at: '0001-01-01T00:00:00Z',
      updated_at: '0001-01-01T00:00:00Z',
      container_metadata: { tag: { name: '0e2a89b', digest: digest('c') }, labels: {}, manifest: {} },
      package_url: 'ghcr.io/theowner/www:0e2a89b',
    },
    registry: { url: 'https://CONTAINER.pkg.github.com/theowner' },
    ...overrides,
  },
});

t.test('a GitHub package event yields the GHCR repository, tag and digest; unknown times count as 0001', async (t) => {
  const outcome = gitHubPush('package', 'delivery-1', githubPackage() as never);
  t.same(outcome, {
    push: { hook: 'github', event: 'delivery-1', image: { registry: 'ghcr.io', repository: 'theowner/www', tag: '0e2a89b', digest: digest('c') }, pushedAt: Date.parse('2025-11-03T13:50:26Z') / 1000 },
  });
  const registryPackage = { action: 'published', registry_package: githubPackage().package };
  t.match(gitHubPush('registry_package', 'd2', registryPackage as never), { push: { image: { repository: 'theowner/www' } } });
});

t.test('without package_url the image is ghcr.io/<namespace>/<name>, lower-cased', async (t) => {
  const pkg = githubPackage().package;
  const withoutUrl = { action: 'published', package: { ...pkg, name: 'Repo/Api', package_version: { ...pkg.package_version, package_url: undefined } } };
  t.match(gitHubPush('package', 'd', withoutUrl as never), { push: { image: { registry: 'ghcr.io', repository: 'theowner/repo/api' } } });
  const nameless = { action: 'published', package: { ...pkg, name: undefined, package_version: { ...pkg.package_version, package_url: '' } } };
  t.match(gitHubPush('package', 'd', nameless as never), { ignored: 'package names no image: no package_version.package_url, and no namespace and name' });
});

t.test('GitHub events that are not published or updated container versions deploy nothing, and say why', async (t) => {
  t.match(gitHubPush('ping', 'd', { zen: 'Keep it logically awesome.' } as never), { ignored: /ping/ });
  t.match(gitHubPush('push', 'd', {} as never), { ignored: /push events deploy nothing/ });
  t.match(gitHubPush('package', 'd', githubPackage({ package_type: 'npm' }) as never), { ignored: /a package of type npm is not a container image/ });
  t.match(gitHubPush('package', 'd', githubPackage({ package_type: undefined }) as never), { ignored: /a package of type none is not a container image/ });
  t.match(gitHubPush('package', 'd', { ...githubPackage(), action: 'deleted' } as never), { ignored: /package deleted: only published or updated versions deploy/ });
  t.match(gitHubPush('package', 'd', { action: 'published' } as never), { ignored: /a package event without package/ });
  t.match(gitHubPush('registry_package', 'd', githubPackage() as never), { ignored: /without registry_package/ }, 'the package under the other key');
  t.match(gitHubPush('package', 'd', githubPackage({ package_version: null }) as never), { ignored: /package\.package_version is missing/ });
  t.match(gitHubPush('package', 'd', githubPackage({ namespace: 42 }) as never), { ignored: /^package\.namespace must be the owner: not a package event the platform can read$/ });
  t.match(gitHubPush('package', 'd', { ...githubPackage(), action: ['published'] } as never), { ignored: /^action must be published, updated/ });
});

t.test('an updated container version deploys like a published one', async (t) => {
  t.match(gitHubPush('package', 'd', { ...githubPackage(), action: 'updated' } as never), { push: { image: { tag: '0e2a89b', digest: digest('c') } } });
});

/** One version of a multi-arch push as GHCR announces it: untagged, its package_url ending in ':'. */
const untagged = (version: Record<string, unknown> = {}) =>
  githubPackage({
    package_version: {
      version: digest('9'),
      name: digest('9'),
      created_at: '2026-03-01T10:00:00Z',
      updated_at: '2026-03-01T10:00:00Z',
      container_metadata: { tag: { name: '', digest: digest('9') }, labels: {}, manifest: {} },
      package_url: 'ghcr.io/theowner/www:',
      ...version,
    },
  });

t.test('an untagged GitHub version (package_url ghcr.io/owner/name:) deploys nothing and says so', async (t) => {
  t.same(gitHubPush('package', 'd', untagged() as never), {
    ignored: `ghcr.io/theowner/www@${digest('9')} is an untagged version (one platform of a multi-arch image, or a push by digest): only a tagged version deploys`,
  });
  t.match(gitHubPush('package', 'd', untagged({ container_metadata: null }) as never), { ignored: /ghcr\.io\/theowner\/www@sha256:9+ is an untagged version/ });
  t.match(gitHubPush('package', 'd', untagged({ package_url: 'GHCR.IO/TheOwner/WWW:', name: null, version: null, container_metadata: { tag: null } }) as never), {
    ignored: /^ghcr\.io\/theowner\/www is an untagged version/,
  });
});

t.test('GitHub digests are read in each form GitHub writes them; the tag may come from package_url', async (t) => {
  const imageOf = (version: Record<string, unknown>) => (gitHubPush('package', 'd', untagged(version) as never) as { push: Push }).push.image;
  const hex = 'ab'.repeat(32);
  t.same(imageOf({ package_url: 'ghcr.io/theowner/www:v1' }), { registry: 'ghcr.io', repository: 'theowner/www', tag: 'v1', digest: digest('9') }, 'the tag of package_url');
  t.match(imageOf({ container_metadata: { tag: { name: 'v1', digest: `SHA256:${hex.toUpperCase()}` } } }), { tag: 'v1', digest: `sha256:${hex}` }, 'upper case');
  t.match(imageOf({ container_metadata: { tag: { name: 'v1' } }, version: hex, name: hex }), { digest: `sha256:${hex}` }, 'bare hex version names');
  // GitHub's own example carries a 40-digit "digest" in container_metadata: not one; the version's name is.
  t.match(imageOf({ container_metadata: { tag: { name: 'v1', digest: `sha256:${'6c62fb45fe'.repeat(4)}` } }, name: `sha256:${hex}` }), { digest: `sha256:${hex}` });
  t.match(imageOf({ package_url: 'ghcr.io/theowner/www:V1.0_rc' }), { tag: 'V1.0_rc' }, 'tags keep their case');
  t.match(gitHubPush('package', 'd', untagged({ package_url: 'ghcr.io/theowner/www:v1', version: '1.0.0', name: 'v1', container_metadata: null }) as never), { ignored: 'ghcr.io/theowner/www:v1 names no digest (sha256:…) to deploy' });
  t.match(gitHubPush('package', 'd', untagged({ package_url: 'ghcr.io/theowner/www:.bad' }) as never), { ignored: /\.bad is not a tag/ });
  t.match(gitHubPush('package', 'd', untagged({ package_url: 'ghcr.io/The Owner/www:v1' }) as never), { ignored: 'ghcr.io/the owner/www is not an image repository' });
});

t.test('the push time is the version time GitHub knows, else the package time', async (t) => {
  const pushedAt = (version: Record<string, unknown>) => (gitHubPush('package', 'd', untagged({ package_url: 'ghcr.io/theowner/www:v1', ...version }) as never) as { push: Push }).push.pushedAt;
  t.equal(pushedAt({}), Date.parse('2026-03-01T10:00:00Z') / 1000);
  t.equal(pushedAt({ updated_at: null, created_at: '2026-03-02T00:00:00Z' }), Date.parse('2026-03-02T00:00:00Z') / 1000);
  t.equal(pushedAt({ updated_at: '0001-01-01T00:00:00Z', created_at: undefined }), Date.parse('2025-11-03T13:50:26Z') / 1000, 'the package time');
});

const push = (image: Partial<Push['image']> = {}): Push => ({
  hook: 'registry',
  event: 'e1',
  image: { registry: '127.0.0.1:5000', repository: 'team/app', tag: 'v2', digest: digest('d'), ...image },
  pushedAt: 100,
});
const service = (name: string, containerImage: string, autoDeploy: 'always' | 'never' = 'always') => ({ name, containerImage, autoDeploy });

t.test('a push deploys services of its repository, records for autoDeploy never, and ignores the rest', async (t) => {
  const services = [service('web', '127.0.0.1:5000/team/app'), service('audit', '127.0.0.1:5000/team/app', 'never'), service('other', '127.0.0.1:5000/team/other'), service('elsewhere', '127.0.0.1:5001/team/app')];
  t.same(
    matchPush(push(), services).map((m) => [m.service, m.action]),
    [
      ['audit', 'record'],
      ['web', 'deploy'],
    ],
  );
  t.same(matchPush(push({ repository: 'team/unrelated' }), services), []);
});

t.test('a declared tag is followed alone; a digest-pinned declaration never moves; untagged pushes deploy nothing', async (t) => {
  const services = [service('stable', '127.0.0.1:5000/team/app:stable'), service('pinned', `127.0.0.1:5000/team/app@${digest('e')}`), service('any', '127.0.0.1:5000/team/app')];
  const actions = (p: Push) => Object.fromEntries(matchPush(p, services).map((m) => [m.service, m.action]));
  t.same(actions(push({ tag: 'v2' })), { any: 'deploy', pinned: 'skip', stable: 'skip' });
  t.same(actions(push({ tag: 'stable' })), { any: 'deploy', pinned: 'skip', stable: 'deploy' });
  t.same(actions(push({ tag: undefined })), { any: 'skip', pinned: 'skip', stable: 'skip' });
  t.match(matchPush(push(), services).find((m) => m.service === 'stable'), { reason: 'stable follows tag stable, not v2' });
});

t.test('repositories compare after Docker normalisation of hosts and library/', async (t) => {
  const hub = { hook: 'dockerhub' as const, image: { ...pushedRepository('docker.io', 'nginx'), tag: 'latest' }, pushedAt: 0 };
  t.same(matchPush(hub, [service('a', 'nginx'), service('b', 'docker.io/library/nginx'), service('c', 'index.docker.io/library/nginx:latest'), service('d', 'team/nginx')]).map((m) => m.service), ['a', 'b', 'c']);
  t.same(pushedRepository('INDEX.DOCKER.IO', 'redis'), { registry: 'docker.io', repository: 'library/redis' });
  t.same(pushedRepository('registry', 'team/app'), { registry: 'registry', repository: 'team/app' }, 'a bare host is a host, not a Docker Hub namespace');
  t.equal(describeImage(push().image), `127.0.0.1:5000/team/app:v2@${digest('d')}`, 'the deploy names the tag and pins the digest');
});

t.test('secrets: bearer tokens, constant-time comparison and GitHub signatures over the raw bytes', async (t) => {
  t.equal(bearerToken('Bearer s3cret'), 's3cret');
  t.equal(bearerToken('bearer  s3cret '), 's3cret');
  t.equal(bearerToken('Basic czNjcmV0'), undefined);
  t.equal(bearerToken(undefined), undefined);
  t.ok(secretMatches('s3cret', 's3cret'));
  t.notOk(secretMatches('s3cre', 's3cret'));
  t.notOk(secretMatches('', 's3cret'));

  const body = Buffer.from('{"action":"published",  "x": "ü"}');
  const signature = `sha256=${createHmac('sha256', 'key').update(body).digest('hex')}`;
  t.ok(githubSignatureValid('key', body, signature));
  t.ok(githubSignatureValid('key', body, signature.toUpperCase().replace('SHA256=', 'sha256=')), 'hex case does not matter');
  t.notOk(githubSignatureValid('other', body, signature), 'another secret');
  t.notOk(githubSignatureValid('key', Buffer.from(JSON.stringify(JSON.parse(body.toString()))), signature), 'the re-serialised body is not the signed one');
  t.notOk(githubSignatureValid('key', body, undefined));
  t.notOk(githubSignatureValid('key', body, 'sha1=abc'));
  t.notOk(githubSignatureValid('key', body, 'sha256=abc'), 'a short signature');
});

t.test('loopback addresses', async (t) => {
  for (const host of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', '::ffff:127.0.0.1']) t.ok(isLoopback(host), host);
  for (const host of ['0.0.0.0', '::', '10.0.0.5', 'example.com', '', undefined]) t.notOk(isLoopback(host), String(host));
});
