import { PlacementState, type PlannerMachine, type ServiceRules } from '../src/placement/planner.js';
import { printTable } from './table.js';

// Issue 4's planner benchmark: 1,000,000 units of 10,000 services over 5,000 machines, with
// conflict rules (half the services spread their own units one per machine, a tenth also avoid
// their team's other services by a `team-N-*` glob, a few bind fixed host ports), placed by the
// pure planner alone. Nomad's C1M (about 3,750 placements/s end to end) is the published figure
// quoted for scale; the target is 50,000/s for the planner alone.

const MACHINES = 5_000;
const SERVICES = 10_000;
const UNITS_PER_SERVICE = 100;

const machines: PlannerMachine[] = Array.from({ length: MACHINES }, (_, i) => ({ id: `machine-${i}`, capacity: 400 }));
const rules: ServiceRules[] = Array.from({ length: SERVICES }, (_, i) => {
  const service = `team-${Math.floor(i / 10)}-svc-${i}`;
  const conflictsWith = i % 10 === 0 ? `team-${Math.floor(i / 10)}-*` : i % 2 === 0 ? service : '';
  return { service, conflictsWith, hostPorts: i % 100 === 1 ? [8000 + (i % 7)] : [] };
});

global.gc?.();
const heapBefore = process.memoryUsage().heapUsed;
const started = performance.now();
const state = new PlacementState(machines, [], rules);
let placed = 0;
let unplaced = 0;
const instances = Array.from({ length: UNITS_PER_SERVICE }, (_, i) => i + 1);
for (const rule of rules) {
  const result = state.place(rule.service, instances);
  placed += result.place.length;
  unplaced += result.unplaced.length;
}
const seconds = (performance.now() - started) / 1000;
const heapAfter = process.memoryUsage().heapUsed;
const rate = placed / seconds;

printTable([
  {
    benchmark: `planner: ${(SERVICES * UNITS_PER_SERVICE).toLocaleString('en')} units, ${MACHINES.toLocaleString('en')} machines, conflict rules`,
    platform: `${Math.round(rate).toLocaleString('en')} placements/s (${seconds.toFixed(1)} s, ${unplaced} unplaced)`,
    reference: '3,750/s (Nomad C1M, end to end, published)',
    ratio: `${(rate / 3750).toFixed(1)}x`,
    target: '>= 50,000/s',
  },
  {
    benchmark: 'planner memory: heap growth while planning',
    platform: `${((heapAfter - heapBefore) / 1024 / 1024).toFixed(0)} MiB heap, ${(process.memoryUsage().rss / 1024 / 1024).toFixed(0)} MiB RSS`,
    reference: '-',
    ratio: '-',
    target: '-',
  },
]);
