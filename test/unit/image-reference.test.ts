import t from 'tap';
import { formatImageReference, parseImageReference, sameRepository } from '../../src/image-reference.js';
import { IMAGE_REFERENCE } from '../../src/schemas/image.js';

t.test('Docker Hub short names get the implicit registry and library/ prefix', async (t) => {
  t.same(parseImageReference('nginx'), { registry: 'docker.io', repository: 'library/nginx' });
  t.same(parseImageReference('nginx:1.25'), { registry: 'docker.io', repository: 'library/nginx', tag: '1.25' });
  t.same(parseImageReference('index.docker.io/team/app'), { registry: 'docker.io', repository: 'team/app' });
  t.ok(sameRepository('nginx', 'docker.io/library/nginx:latest'));
});

t.test('a registry with a port is told apart from a tag', async (t) => {
  t.same(parseImageReference('127.0.0.1:5000/team/web:v2'), { registry: '127.0.0.1:5000', repository: 'team/web', tag: 'v2' });
  t.same(parseImageReference('localhost/web'), { registry: 'localhost', repository: 'web' });
  t.notOk(sameRepository('127.0.0.1:5000/team/web', '127.0.0.1:5001/team/web'));
});

t.test('digests are kept and formatted', async (t) => {
  const digest = `sha256:${'a'.repeat(64)}`;
  const parsed = parseImageReference(`127.0.0.1:5000/web:v1@${digest}`);
  t.equal(parsed.digest, digest);
  t.equal(formatImageReference(parsed), `127.0.0.1:5000/web@${digest}`);
  t.equal(formatImageReference(parseImageReference('web')), 'docker.io/library/web:latest');
});

t.test('the schema pattern accepts references and refuses shell and path tricks', async (t) => {
  const pattern = new RegExp(IMAGE_REFERENCE);
  for (const good of ['web', 'team/web:v1', '127.0.0.1:5000/team/web:v1', 'ghcr.io/org/app@sha256:' + 'b'.repeat(64)]) t.match(good, pattern, good);
  for (const bad of ['Web', 'web;rm -rf', '../etc', 'web:', 'team//web', 'a b']) t.notMatch(bad, pattern, bad);
});
