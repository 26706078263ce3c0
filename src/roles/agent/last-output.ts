// A failed container's last output as kept (src/store/records/unit-outputs.ts): its text split
// into lines, the last `maxLines` of them, cut to `maxBytes` in all. Pure.

export interface OutputBounds {
  maxLines: number;
  maxBytes: number;
}

export interface LastLines {
  lines: string[];
  /** Older lines, or the start of one line longer than the bytes allowed, were cut. */
  truncated: boolean;
}

/** The last lines of `text` within both bounds, newest kept; a line too long alone keeps its end (where the error usually is). */
export function lastLines(text: string, bounds: OutputBounds): LastLines {
  const all = text.split('\n');
  if (all.at(-1) === '') all.pop();
  let truncated = all.length > bounds.maxLines;
  const lines: string[] = [];
  let bytes = 0;
  for (let i = all.length - 1; i >= Math.max(0, all.length - bounds.maxLines); i--) {
    const line = all[i] ?? '';
    const size = Buffer.byteLength(line) + 1;
    if (bytes + size <= bounds.maxBytes) {
      lines.unshift(line);
      bytes += size;
      continue;
    }
    truncated = true;
    if (lines.length === 0) lines.unshift(endOf(line, bounds.maxBytes - 1));
    break;
  }
  return { lines, truncated };
}

/** The last `maxBytes` bytes of `line`, never splitting a character. */
function endOf(line: string, maxBytes: number): string {
  const bytes = Buffer.from(line);
  let start = Math.max(0, bytes.length - maxBytes);
  // A UTF-8 continuation byte (10xxxxxx) is the middle of a character: start after it.
  while (start < bytes.length && ((bytes[start] ?? 0) & 0xc0) === 0x80) start++;
  return bytes.subarray(start).toString('utf8');
}
