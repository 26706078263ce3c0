import t from 'tap';
import { defaultMaxUnits, resolveConfig } from '../../src/config.js';

// A machine's capacity in units is its agent's --max-units (PLATFORM_MAX_UNITS), 100 unless set.

const agent = (flags: Record<string, string>, env: Record<string, string> = {}) => resolveConfig({ role: 'agent', ...flags }, env).agent;

t.test('--max-units sets the units a machine takes, PLATFORM_MAX_UNITS too, the flag first', async (t) => {
  t.equal(agent({}).maxUnits, 100, 'the default is 100');
  t.equal(defaultMaxUnits, 100);
  t.equal(agent({ maxUnits: '2' }).maxUnits, 2);
  t.equal(agent({}, { PLATFORM_MAX_UNITS: '1500' }).maxUnits, 1500);
  t.equal(agent({ maxUnits: '7' }, { PLATFORM_MAX_UNITS: '1500' }).maxUnits, 7, 'the flag wins over the environment');
  t.equal(agent({}, { PLATFORM_MAX_UNITS: '' }).maxUnits, 100, 'an empty variable counts as unset');
});

t.test('a --max-units that is not a positive integer is refused, naming the flag and the rule', async (t) => {
  for (const bad of ['0', '-3', '2.5', 'lots', '100001']) {
    t.throws(() => agent({ maxUnits: bad }), { message: `--max-units must be an integer from 1 to 100000, got ${bad}` }, bad);
  }
  t.throws(() => agent({}, { PLATFORM_MAX_UNITS: 'many' }), { message: '--max-units must be an integer from 1 to 100000, got many' });
});
