import { PlacementState, type PlannerMachine, type ServiceRules } from '../src/placement/planner.js';
import { printTable } from './table.js';

// Issue 4's planner benchmark: 1,000,000 units of 10,000 services over 5,000 machines, with
// conflict rules (half the services spread their own units one per machine, a tenth also avoid
// their team's other services by a `team-N-*` glob, a few bind fixed host ports), placed by the
// pure planner alone. Nomad's C1M (about 3,750 placements/s end to end) is the published figure
// quoted for scale; the target is 50,000/s for the planner alone. Issue 18 adds the same plan with
// resources: every service reserves memory and CPUs, and machines are sized so memory binds on
// some of them (target 150,000/s).

const MACHINES = 5_000;
const SERVICES = 10_000;
const UNITS_PER_SERVICE = 100;

const conflictRules = (i: number): ServiceRules => {
  const service = `team-${Math.floor(i / 10)}-svc-${i}`;
  const conflictsWith = i % 10 === 0 ? `team-${Math.floor(i / 10)}-*` : i % 2 === 0 ? service : '';
  return { service, conflictsWith, hostPorts: i % 100 === 1 ? [8000 + (i % 7)] : [] };
};

// 64-512 MB and 0.1-0.5 CPUs a unit: about 240 MB and 0.28 CPUs on average, so 200 units a
// machine need about 48 GB and 56 CPUs of the 52 GB and 64 CPUs each machine has.
const withResources = (i: number): ServiceRules => ({ ...conflictRules(i), memoryMB: 64 * 2 ** (i % 4), cpus: [0.1, 0.25, 0.5][i % 3]! });

interface Case {
  name: string;
  machines: PlannerMachine[];
  rules: ServiceRules[];
  target: string;
}

const cases: Case[] = [
  {
    name: 'conflict rules',
    machines: Array.from({ length: MACHINES }, (_, i) => ({ id: `machine-${i}`, capacity: 400 })),
    rules: Array.from({ length: SERVICES }, (_, i) => conflictRules(i)),
    target: '>= 50,000/s',
  },
  {
    name: 'conflict rules and resources',
    machines: Array.from({ length: MACHINES }, (_, i) => ({ id: `machine-${i}`, capacity: 400, memoryMB: 52 * 1024, cpus: 64 })),
    rules: Array.from({ length: SERVICES }, (_, i) => withResources(i)),
    target: '>= 150,000/s',
  },
];

const instances = Array.from({ length: UNITS_PER_SERVICE }, (_, i) => i + 1);
const rows = cases.flatMap(({ name, machines, rules, target }) => {
  global.gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  const started = performance.now();
  const state = new PlacementState(machines, [], rules);
  let placed = 0;
  let unplaced = 0;
  for (const rule of rules) {
    const result = state.place(rule.service, instances);
    placed += result.place.length;
    unplaced += result.unplaced.length;
  }
  const seconds = (performance.now() - started) / 1000;
  const heapAfter = process.memoryUsage().heapUsed;
  const rate = placed / seconds;
  return [
    {
      benchmark: `planner: ${(SERVICES * UNITS_PER_SERVICE).toLocaleString('en')} units, ${MACHINES.toLocaleString('en')} machines, ${name}`,
      platform: `${Math.round(rate).toLocaleString('en')} placements/s (${seconds.toFixed(1)} s, ${unplaced} unplaced)`,
      reference: '3,750/s (Nomad C1M, end to end, published)',
      ratio: `${(rate / 3750).toFixed(1)}x`,
      target,
    },
    {
      benchmark: `planner memory (${name}): heap growth while planning`,
      platform: `${((heapAfter - heapBefore) / 1024 / 1024).toFixed(0)} MiB heap, ${(process.memoryUsage().rss / 1024 / 1024).toFixed(0)} MiB RSS`,
      reference: '-',
      ratio: '-',
      target: '-',
    },
  ];
});

printTable(rows);
