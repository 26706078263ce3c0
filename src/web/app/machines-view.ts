import type { App, View } from './app.js';
import type { Changes } from '../../client/cluster-state.js';
import { h, setText } from './element.js';
import { formatTime, plural } from './format.js';
import type { Machine } from './model.js';
import { legend, renderUnits, toneOf, unitLabel } from './unit-square.js';
import type { UnitMark } from './unit-groups.js';

// The Machines tab: every registered machine with its Docker engine and its units as squares,
// every machine being drained in amber (its units are moving away), and every lost machine (units
// are assigned to it, but it is no longer registered) in red.

export class MachinesView implements View {
  readonly element: HTMLElement;
  readonly title = 'Machines';
  private readonly cards = new Map<string, MachineCard>();
  private readonly list: HTMLElement;
  private readonly summary: HTMLElement;

  constructor(private readonly app: App) {
    this.summary = h('p', { class: 'summary', role: 'status' });
    this.list = h('ul', { class: 'machine-list', 'aria-label': 'Machines' });
    this.element = h('section', { class: 'view' }, h('div', { class: 'view-head' }, h('h1', { tabindex: -1 }, 'Machines')), h('div', { class: 'toolbar' }, legend()), this.summary, this.list);
  }

  update(changes: Changes): void {
    const { state } = this.app;
    const ids = new Set([...state.machines.keys(), ...state.machinesWithUnits()]);
    const touched = changes.everything ? new Set([...ids, ...this.cards.keys()]) : changes.machines;
    if (touched.size === 0) return;
    for (const id of touched) {
      const card = this.cards.get(id);
      if (!ids.has(id)) {
        card?.element.remove();
        this.cards.delete(id);
        continue;
      }
      (card ?? this.add(id)).update(state.machines.get(id), state.unitsOn(id).map((unit) => ({ label: unitLabel(unit), tone: toneOf(unit), where: unit.service })));
    }
    const lost = [...ids].filter((id) => !state.machines.has(id)).length;
    setText(this.summary, state.loaded ? `${plural(state.machines.size, 'machine')} registered${lost ? `, ${lost} lost` : ''}` : 'Loading…');
  }

  private add(id: string): MachineCard {
    const card = new MachineCard(id);
    this.cards.set(id, card);
    const after = [...this.cards.keys()].sort().find((other) => other > id);
    this.list.insertBefore(card.element, after ? this.cards.get(after)!.element : null);
    return card;
  }
}

class MachineCard {
  readonly element: HTMLLIElement;
  private readonly state: HTMLElement;
  private readonly details: HTMLElement;
  private readonly squares: HTMLElement;

  constructor(readonly id: string) {
    this.state = h('span', { class: 'badge' });
    this.details = h('p', { class: 'muted machine-details' });
    this.squares = h('div', { class: 'squares', role: 'group', 'aria-label': `Units on ${id}` });
    this.element = h('li', { class: 'machine-card', 'data-machine': id }, h('div', { class: 'machine-head' }, h('h2', {}, id), this.state), this.details, this.squares);
  }

  update(machine: Machine | undefined, squares: UnitMark[]): void {
    const lost = !machine;
    const engineDown = machine !== undefined && !machine.docker.reachable;
    const drain = machine?.drain;
    this.element.classList.toggle('lost', lost);
    this.element.classList.toggle('warning', engineDown);
    this.element.classList.toggle('draining', drain !== undefined);
    this.state.className = `badge ${lost || engineDown ? 'red' : drain ? 'amber' : 'green'}`;
    setText(this.state, lost ? 'lost' : engineDown ? 'Docker unreachable' : drain ? 'draining' : 'ready');
    setText(
      this.details,
      lost
        ? `Not registered any more (its agent stopped or lost the store); ${plural(squares.length, 'unit')} still assigned to it.`
        : [
            machine.address,
            machine.network,
            machine.docker.reachable ? `Docker ${machine.docker.version ?? ''}`.trim() : `Docker: ${machine.docker.error ?? 'unreachable'}`,
            `${plural(machine.unitCount, 'unit')} of ${machine.capacity.units}`,
            ...Object.entries(machine.labels).map(([key, value]) => `${key}=${value}`),
            `up since ${formatTime(machine.startedAt)}`,
            ...(drain ? [`draining since ${formatTime(drain.since)}${drain.reason ? `: ${drain.reason}` : ''} (no new units; its units move to other machines)`] : []),
          ].join(' · '),
    );
    renderUnits(this.squares, squares, 'service');
  }
}
