import t from 'tap';
import { describeValidation } from '../../src/http/errors.js';

t.test('a pattern failure names the field and the rule from the schema description', async (t) => {
  const message = describeValidation(
    [{ keyword: 'pattern', instancePath: '/name', params: {}, message: 'must match pattern', parentSchema: { description: 'a DNS label' } }],
    'body',
  );
  t.equal(message, 'name must be a DNS label');
});

t.test('a missing field is named', async (t) => {
  t.equal(describeValidation([{ keyword: 'required', instancePath: '', params: { missingProperty: 'containerImage' } }], 'body'), 'containerImage is required');
});

t.test('containerRepository at the directory points to containerImage', async (t) => {
  const message = describeValidation(
    [{ keyword: 'additionalProperties', instancePath: '', params: { additionalProperty: 'containerRepository' }, parentSchema: { properties: { containerImage: {} } } }],
    'body',
  );
  t.match(message, /containerRepository .*containerImage/);
});

t.test('nested fields are named with dots', async (t) => {
  const message = describeValidation(
    [{ keyword: 'maximum', instancePath: '/ports/0/container', params: {}, message: 'must be <= 65535', parentSchema: { description: 'an integer from 1 to 65535' } }],
    'body',
  );
  t.equal(message, 'ports.0.container must be an integer from 1 to 65535');
});
