import t from 'tap';
import { LOOK_AT_LEAST_EVERY_MS, VanishedMachines } from '../../src/roles/scheduler/healing/vanished-machines.js';

// When healing lists the jobs to find those of lost machines: not on every pass (all job records),
// only when a machine seen present may have gone since the last complete look.

const machines = (...ids: string[]) => new Set(ids);

t.test('the first pass of a leadership looks; then passes with the same or more machines do not', async (t) => {
  const vanished = new VanishedMachines();
  t.ok(vanished.mustLook(machines('a', 'b'), 0), 'nothing is known before a first look');
  vanished.looked(machines('a', 'b'), true, 0);
  t.notOk(vanished.mustLook(machines('a', 'b'), 10_000), 'the same machines');
  t.notOk(vanished.mustLook(machines('a', 'b', 'c'), 20_000), 'a machine joined');
});

t.test('a machine gone since the last look, also one that joined after it, makes the next pass look', async (t) => {
  const vanished = new VanishedMachines();
  vanished.mustLook(machines('a', 'b'), 0);
  vanished.looked(machines('a', 'b'), true, 0);
  t.ok(vanished.mustLook(machines('a'), 10_000), 'b is gone');
  vanished.looked(machines('a'), true, 10_000);
  t.notOk(vanished.mustLook(machines('a'), 20_000), 'its jobs were ended: nothing more to look for');
  t.notOk(vanished.mustLook(machines('a', 'c'), 30_000), 'c joined');
  t.ok(vanished.mustLook(machines('a'), 40_000), 'c, never in a look, is gone: it may have held jobs');
});

t.test('a machine registered and lost between two passes, told by the watch, makes the next pass look', async (t) => {
  const vanished = new VanishedMachines();
  vanished.mustLook(machines('a'), 0);
  vanished.looked(machines('a'), true, 0);
  vanished.saw('d');
  t.ok(vanished.mustLook(machines('a'), 10_000), 'd was never present at a pass, and is gone: a job may have been placed on it (jobs.test\'s lost machine)');
  vanished.forget();
  vanished.saw('e');
  t.ok(vanished.mustLook(machines('a'), 20_000), 'with nothing known, a look all the same');
});

t.test('a look that left jobs of a machine in its renewal grace looks again on the next pass', async (t) => {
  const vanished = new VanishedMachines();
  vanished.mustLook(machines('a'), 0);
  vanished.looked(machines('a'), false, 0);
  t.ok(vanished.mustLook(machines('a'), 10_000), 'b, still renewing, is looked for again');
  vanished.looked(machines('a'), true, 10_000);
  t.notOk(vanished.mustLook(machines('a'), 20_000));
});

t.test('a look that failed is tried again while the machine is still gone', async (t) => {
  const vanished = new VanishedMachines();
  vanished.mustLook(machines('a', 'b'), 0);
  vanished.looked(machines('a', 'b'), true, 0);
  t.ok(vanished.mustLook(machines('a'), 10_000), 'b is gone; the listing then fails, and looked() is not called');
  t.ok(vanished.mustLook(machines('a'), 20_000), 'so the next pass looks again');
});

t.test('a new leadership forgets; and a look comes at least every few minutes', async (t) => {
  const vanished = new VanishedMachines();
  vanished.mustLook(machines('a'), 0);
  vanished.looked(machines('a'), true, 0);
  vanished.forget();
  t.ok(vanished.mustLook(machines('a'), 1000), 'after forget');
  vanished.looked(machines('a'), true, 1000);
  t.notOk(vanished.mustLook(machines('a'), 1000 + LOOK_AT_LEAST_EVERY_MS - 1));
  t.ok(vanished.mustLook(machines('a'), 1000 + LOOK_AT_LEAST_EVERY_MS), 'a machine that came and went between two passes is not missed for long');
});
