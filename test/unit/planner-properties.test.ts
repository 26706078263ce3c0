import t from 'tap';
import { pick, seededRandom as random } from '../harness/random.js';
import { conflicts, PlacementState, type PlacedUnit, type PlannerMachine, type ServiceRules } from '../../src/placement/planner.js';

// Property tests over random clusters: whatever the machines, units and rules, a plan never puts
// conflicting units together, never exceeds a machine's capacity (units, memory, CPUs), and leaves a
// unit unplaced only when no machine could take it, with spread and binpack alike. Conflicts are checked with the plain pairwise rule, independently
// of the planner's index. Seeded, so a failure can be replayed.

function randomCase(seed: number) {
  const rnd = random(seed);
  const machines: PlannerMachine[] = Array.from({ length: 1 + Math.floor(rnd() * 8) }, (_, i) => ({
    id: `m${i}`,
    capacity: 1 + Math.floor(rnd() * 6),
    ...(rnd() < 0.7 ? { memoryMB: pick(rnd, [256, 1000, 2048]) } : {}),
    ...(rnd() < 0.7 ? { cpus: pick(rnd, [0.5, 1, 2]) } : {}),
    ...(rnd() < 0.1 ? { unavailable: 'Docker engine unreachable' } : {}),
  }));
  const teams = ['api', 'web', 'db'];
  const services = Array.from({ length: 1 + Math.floor(rnd() * 6) }, (_, i) => `${pick(rnd, teams)}-${i}`);
  const globs = ['', '', 'web-*', 'api-*', '*-1', 'db-2', '*'];
  const rules: ServiceRules[] = services.map((service) => ({
    service,
    conflictsWith: rnd() < 0.2 ? service : pick(rnd, globs),
    hostPorts: rnd() < 0.15 ? [pick(rnd, [80, 443])] : [],
    ...(rnd() < 0.6 ? { memoryMB: pick(rnd, [64, 300, 512]) } : {}),
    ...(rnd() < 0.6 ? { cpus: pick(rnd, [0.1, 0.25, 0.5]) } : {}),
    ...(rnd() < 0.3 ? { placement: 'binpack' as const } : {}),
  }));
  const requests = services.map((service) => ({ service, count: 1 + Math.floor(rnd() * 5) }));
  return { machines, rules, requests };
}

const rulesOf = (rules: ServiceRules[], service: string) => rules.find((r) => r.service === service)!;

function canTake(machine: PlannerMachine, units: PlacedUnit[], rules: ServiceRules[], service: string): boolean {
  if (machine.unavailable) return false;
  const here = units.filter((u) => u.machine === machine.id);
  if (here.length >= machine.capacity) return false;
  // Summed in thousandths of a CPU, as a person would count them, independently of the planner.
  const sum = (of: (rule: ServiceRules) => number) => [...here.map((u) => rulesOf(rules, u.service)), rulesOf(rules, service)].reduce((n, rule) => n + of(rule), 0);
  if (machine.memoryMB !== undefined && sum((rule) => rule.memoryMB ?? 0) > machine.memoryMB) return false;
  if (machine.cpus !== undefined && sum((rule) => Math.round((rule.cpus ?? 0) * 1000)) > machine.cpus * 1000) return false;
  return !here.some((u) => conflicts(rulesOf(rules, service), rulesOf(rules, u.service)));
}

for (let seed = 1; seed <= 300; seed++) {
  const { machines, rules, requests } = randomCase(seed);
  const state = new PlacementState(machines, [], rules);
  const placed: PlacedUnit[] = [];
  const failures: string[] = [];
  for (const { service, count } of requests) {
    const instances = Array.from({ length: count }, (_, i) => i + 1);
    const result = state.place(service, instances);
    for (const p of result.place) {
      const machine = machines.find((m) => m.id === p.machine)!;
      if (!canTake(machine, placed, rules, service)) failures.push(`seed ${seed}: ${service}-${p.instance} on ${p.machine} breaks a rule`);
      placed.push({ service, instance: p.instance, machine: p.machine });
    }
    for (const u of result.unplaced) {
      const taker = machines.find((m) => canTake(m, placed, rules, service));
      if (taker) failures.push(`seed ${seed}: ${service}-${u.instance} left unplaced although ${taker.id} could take it`);
      if (!u.reason) failures.push(`seed ${seed}: no reason for ${service}-${u.instance}`);
    }
  }
  t.same(failures, [], `seed ${seed}: ${machines.length} machines, ${requests.length} services, ${placed.length} units placed`);
}
