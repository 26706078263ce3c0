// A binary min-heap of machines by load (the planner keys it by rank), for picking the least-loaded machine in O(log n).
// Entries are not updated in place: a machine whose load changed is pushed again and the stale
// entry is skipped when it surfaces (its recorded load no longer matches).

export interface HeapEntry {
  load: number;
  index: number;
}

const before = (a: HeapEntry, b: HeapEntry): boolean => a.load < b.load || (a.load === b.load && a.index < b.index);

export class MachineHeap {
  private readonly entries: HeapEntry[] = [];

  get size(): number {
    return this.entries.length;
  }

  push(entry: HeapEntry): void {
    const entries = this.entries;
    entries.push(entry);
    let i = entries.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(entries[i]!, entries[parent]!)) break;
      [entries[i], entries[parent]] = [entries[parent]!, entries[i]!];
      i = parent;
    }
  }

  pop(): HeapEntry | undefined {
    const entries = this.entries;
    const top = entries[0];
    const last = entries.pop();
    if (entries.length > 0 && last) {
      entries[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < entries.length && before(entries[left]!, entries[smallest]!)) smallest = left;
        if (right < entries.length && before(entries[right]!, entries[smallest]!)) smallest = right;
        if (smallest === i) break;
        [entries[i], entries[smallest]] = [entries[smallest]!, entries[i]!];
        i = smallest;
      }
    }
    return top;
  }
}
