import { assignmentKey } from '../keys.js';
import type { Operation, Store } from '../store.js';
import { deleteKeys } from '../json-records.js';
import type { Assignment } from '../../schemas/cluster.js';
import { slotOf } from '../../units.js';

// The one owner of /platform/assignments/<machine>/<unit>@<spec>: intent, one unit slot on one
// machine. Written by the leading scheduler only: placed and rewritten by its plan applier, deleted
// by a stop (runner.ts) and housekeeping; agents read their own prefix.

type Slot = Pick<Assignment, 'machine' | 'unit' | 'spec'>;

/** The key of an assignment's slot, which also names it in the watched copy. */
export const assignmentKeyOf = (assignment: Slot): string => assignmentKey(assignment.machine, slotOf(assignment));

export const assignmentPut = (assignment: Assignment): Operation => ({ op: 'put', key: assignmentKeyOf(assignment), value: JSON.stringify(assignment) });

export const assignmentDelete = (assignment: Slot): Operation => ({ op: 'delete', key: assignmentKeyOf(assignment) });

/** Deletes the assignments (their agents stop the units), in transactions of up to 100. */
export const deleteAssignments = (store: Store, doomed: readonly Slot[]): Promise<void> => deleteKeys(store, doomed.map(assignmentKeyOf));
