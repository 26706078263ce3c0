import { h } from './element.js';
import type { Service, Unit } from './model.js';
import { GROUP_ABOVE, renderGroups, type UnitMark } from './unit-groups.js';

// A unit as a coloured square. Its accessible name and title read `<unit> <ACTIVE>/<SUB>`, so the
// state is never told by colour alone.

export type Tone = 'green' | 'amber' | 'red' | 'grey';

export function toneOf(unit: Pick<Unit, 'active' | 'sub'> & { desired?: boolean }): Tone {
  if (unit.active === 'failed' || unit.sub === 'failed' || unit.sub === 'auto-restart') return 'red';
  if (unit.active === 'inactive') return 'grey';
  if (unit.desired === false) return 'amber';
  if (unit.active === 'active' && unit.sub === 'running') return 'green';
  if (unit.active === 'activating' || unit.active === 'deactivating' || unit.active === 'active') return 'amber';
  return 'grey';
}

export const unitLabel = (unit: Pick<Unit, 'unit' | 'active' | 'sub'>): string => `${unit.unit} ${unit.active}/${unit.sub}`;

export function square(label: string, tone: Tone): HTMLElement {
  return h('span', { class: `sq sq-${tone}`, role: 'img', 'aria-label': label, title: label });
}

/**
 * The squares of a service: one per unit slot, or, before its first deploy, one grey square per
 * unit it will have.
 */
export function serviceSquares(service: Service | undefined, units: Unit[], deployed: boolean): UnitMark[] {
  if (units.length > 0 || deployed || !service) return units.map((unit) => ({ label: unitLabel(unit), tone: toneOf(unit), where: unit.machine }));
  return Array.from({ length: service.config.numInstances }, (_, i) => ({ label: `${service.name}-${i + 1}.service inactive/dead`, tone: 'grey' as const }));
}

/**
 * Shows the units in `container`: a square each, or, past GROUP_ABOVE, grouped by state and by
 * where they are (`placeWord`: "machine" on a service, "service" on a machine's card).
 */
export function renderUnits(container: HTMLElement, marks: UnitMark[], placeWord: string): void {
  container.classList.toggle('grouped', marks.length > GROUP_ABOVE);
  if (marks.length > GROUP_ABOVE) renderGroups(container, marks, placeWord);
  else renderSquares(container, marks);
}

/** Replaces the squares in `container` when they differ from what it shows. */
function renderSquares(container: HTMLElement, squares: UnitMark[]): void {
  const signature = squares.map((s) => `${s.tone}:${s.label}`).join('|');
  if (container.dataset.signature === signature) return;
  container.dataset.signature = signature;
  container.replaceChildren(...squares.map((s) => square(s.label, s.tone)));
}

export function legend(): HTMLElement {
  const item = (tone: Tone, text: string) => h('li', {}, h('span', { class: `sq sq-${tone}`, 'aria-hidden': 'true' }), text);
  return h(
    'ul',
    { class: 'legend', 'aria-label': 'Legend' },
    item('green', 'running'),
    item('amber', 'starting or draining'),
    item('red', 'failed'),
    item('grey', 'not deployed'),
  );
}
