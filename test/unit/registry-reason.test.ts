import t from 'tap';
import { errorReason } from '../../src/roles/scheduler/deploys/registry-client.js';

// What a deploy quotes of a registry's refusal: the messages of its JSON errors, printable and
// bounded, and nothing of a body that is not such JSON.

t.test("a registry's JSON errors give their messages, joined", async (t) => {
  t.equal(errorReason('{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]}'), 'authentication required');
  t.equal(errorReason('{"errors":[{"code":"DENIED","message":"access denied"},{"code":"UNAUTHORIZED"}]}'), 'access denied; UNAUTHORIZED');
  t.equal(errorReason('{"details":"incorrect username or password"}'), 'incorrect username or password', "a token server's details");
});

t.test('anything else is no reason: text, HTML, JSON without errors', async (t) => {
  for (const body of [undefined, '', 'internal-secret', '<html>401</html>', '{"token":"x"}', '{"errors":"x"}', 'null']) t.equal(errorReason(body), undefined, String(body));
});

t.test('control characters are dropped and the reason is at most 200 characters', async (t) => {
  t.equal(errorReason(JSON.stringify({ errors: [{ message: 'bad\u001b[2J\nlogin\u0000' }] })), 'bad[2Jlogin');
  t.equal(errorReason(JSON.stringify({ errors: [{ message: 'x'.repeat(5000) }] }))?.length, 200);
});
