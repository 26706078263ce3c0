import { h, setText } from './element.js';
import type { Tone } from './unit-square.js';

// Past 50 units a row of squares stops telling anything (1,000 squares for a 1,000-unit service)
// and costs a DOM node each, so the units are shown grouped instead: counts by state, counts by
// machine (or, on a machine's card, by service), and the first failing units by name. Grouping is
// pure (groupUnits) and tested alone; rendering replaces the group only when its text changes.

/** More units than this are shown grouped, not as squares. */
export const GROUP_ABOVE = 50;
/** Failing units named by the group; the rest are counted. */
const FAILING_NAMED = 10;
/** Places (machines or services) listed by the group, the fullest first; the rest are counted. */
const PLACES_LISTED = 12;

/** A unit as the views mark it: its label (`<unit> <ACTIVE>/<SUB>`), its tone, and where it is (its machine, or its service). */
export interface UnitMark {
  label: string;
  tone: Tone;
  where?: string;
}

export interface UnitGroups {
  total: number;
  /** Units per tone, in the legend's order, tones with none left out. */
  tones: { tone: Tone; count: number }[];
  /** Units per place, the fullest first, at most PLACES_LISTED. */
  places: { where: string; count: number; running: number; failed: number }[];
  /** Places beyond those listed. */
  morePlaces: number;
  /** Labels of the first failing units (and where they are). */
  failing: string[];
  /** Failing units beyond those named. */
  moreFailing: number;
}

const toneOrder: Tone[] = ['green', 'amber', 'red', 'grey'];
export const toneWords: Record<Tone, string> = { green: 'running', amber: 'starting or draining', red: 'failed', grey: 'not running' };

export function groupUnits(marks: UnitMark[]): UnitGroups {
  const perTone = new Map<Tone, number>();
  const perPlace = new Map<string, { where: string; count: number; running: number; failed: number }>();
  const failing: string[] = [];
  let failingCount = 0;
  for (const mark of marks) {
    perTone.set(mark.tone, (perTone.get(mark.tone) ?? 0) + 1);
    if (mark.where !== undefined) {
      let place = perPlace.get(mark.where);
      if (!place) perPlace.set(mark.where, (place = { where: mark.where, count: 0, running: 0, failed: 0 }));
      place.count++;
      if (mark.tone === 'green') place.running++;
      if (mark.tone === 'red') place.failed++;
    }
    if (mark.tone === 'red') {
      failingCount++;
      if (failing.length < FAILING_NAMED) failing.push(mark.where === undefined ? mark.label : `${mark.label} on ${mark.where}`);
    }
  }
  const places = [...perPlace.values()].sort((a, b) => b.count - a.count || a.where.localeCompare(b.where));
  return {
    total: marks.length,
    tones: toneOrder.filter((tone) => perTone.has(tone)).map((tone) => ({ tone, count: perTone.get(tone)! })),
    places: places.slice(0, PLACES_LISTED),
    morePlaces: Math.max(0, places.length - PLACES_LISTED),
    failing,
    moreFailing: failingCount - failing.length,
  };
}

/** Replaces what `container` shows with the units grouped, when the groups differ from what it shows; `placeWord` names what `where` is ("machine", "service"). */
export function renderGroups(container: HTMLElement, marks: UnitMark[], placeWord: string): void {
  const groups = groupUnits(marks);
  const signature = `groups:${JSON.stringify(groups)}`;
  if (container.dataset.signature === signature) return;
  container.dataset.signature = signature;
  container.replaceChildren(groupsElement(groups, placeWord));
}

function groupsElement(groups: UnitGroups, placeWord: string): HTMLElement {
  const tones = h(
    'ul',
    { class: 'unit-tones', 'aria-label': 'Units by state' },
    groups.tones.map(({ tone, count }) => h('li', { 'data-tone': tone }, h('span', { class: `sq sq-${tone}`, 'aria-hidden': 'true' }), `${count} ${toneWords[tone]}`)),
  );
  const places =
    groups.places.length === 0
      ? false
      : h(
          'ul',
          { class: 'unit-places', 'aria-label': `Units by ${placeWord}` },
          groups.places.map((place) => h('li', { 'data-where': place.where }, h('strong', {}, place.where), ` ${place.count}: ${place.running} running${place.failed ? `, ${place.failed} failed` : ''}`)),
          groups.morePlaces ? h('li', { class: 'muted' }, `and ${groups.morePlaces} more ${placeWord}s`) : false,
        );
  const failing =
    groups.failing.length === 0
      ? false
      : h(
          'ul',
          { class: 'unit-failing', 'aria-label': 'Failing units' },
          groups.failing.map((label) => h('li', {}, label)),
          groups.moreFailing ? h('li', { class: 'muted' }, `and ${groups.moreFailing} more failing`) : false,
        );
  const summary = h('p', { class: 'unit-total' });
  setText(summary, `${groups.total} units, grouped`);
  return h('div', { class: 'unit-groups' }, summary, tones, places, failing);
}
