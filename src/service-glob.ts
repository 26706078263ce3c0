// Globs over service names (a service's `conflictsWith`, a token's `--services`): literal
// characters and `*`, which matches any run of characters. A general glob library backtracks, and
// `*-*-*-*-*-*-*-*-x` against a 63-character name took picomatch 36 s inside the planner. With `*`
// as the only wildcard no backtracking is needed: the text between stars must appear in order, and
// taking each at its earliest place is never worse than a later one. So a match costs at most
// (name length × pattern length) character comparisons, both bounded to 63 by the schemas.

export type NameMatcher = (name: string) => boolean;

/** Compiles `glob`; every character but `*` is literal (the schemas allow only [a-z0-9-] besides). */
export function compileServiceGlob(glob: string): NameMatcher {
  const parts = glob.split('*');
  if (parts.length === 1) return (name) => name === glob;
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  const middle = parts.slice(1, -1).filter(Boolean);
  const fixed = first.length + last.length;
  return (name) => {
    if (name.length < fixed || !name.startsWith(first) || !name.endsWith(last)) return false;
    // The middle parts must fit, in order, between the prefix and the suffix.
    let from = first.length;
    const end = name.length - last.length;
    for (const part of middle) {
      const at = name.indexOf(part, from);
      if (at === -1 || at + part.length > end) return false;
      from = at + part.length;
    }
    return true;
  };
}
