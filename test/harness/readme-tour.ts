// The README's tour as data: its shell blocks, in order, and the output each is shown to print.
// The tour marks its blocks by their info strings, so nothing else in the README is taken for it:
// ```sh tour                 a command block, run to its end in the reader's terminal;
// ```sh tour-own-terminal    a command that keeps running (a registry, the platform) in a terminal of its own;
// ```text tour-output        what the command block before it prints.
// In an output, `…` stands for any text within a line, a line of `…` alone for any lines, and a
// run of spaces for any run (tables pad their columns to what they hold).

export interface TourStep {
  kind: 'run' | 'own-terminal';
  script: string;
  /** The output the README shows for it; undefined when it shows none. */
  output?: string;
  /** The README line the block starts at, for failure messages. */
  line: number;
}

const FENCE = /^```(\S*)(?:[ \t]+(\S+))?[ \t]*\n([\s\S]*?)^```[ \t]*$/gm;

export function tourSteps(readme: string): TourStep[] {
  const steps: TourStep[] = [];
  for (const match of readme.matchAll(FENCE)) {
    const [, language, mark, body] = match;
    const line = readme.slice(0, match.index).split('\n').length;
    if (mark === 'tour-output') {
      const step = steps.at(-1);
      if (!step || step.output !== undefined) throw new Error(`README.md line ${line}: a tour-output block follows no tour command block`);
      step.output = body!;
    } else if (mark === 'tour' || mark === 'tour-own-terminal') {
      if (language !== 'sh') throw new Error(`README.md line ${line}: a tour command block is \`\`\`sh, not \`\`\`${language}`);
      steps.push({ kind: mark === 'tour' ? 'run' : 'own-terminal', script: body!, line });
    }
  }
  return steps;
}

const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** One shown line as a pattern for one printed line. */
function linePattern(shown: string): string {
  return shown
    .split('…')
    .map((part) => part.split(/ {2,}/).map(escape).join(' +'))
    .join('.*?');
}

const lines = (text: string): string[] => text.replace(/\s+$/, '').split('\n').map((line) => line.trimEnd());

/** Whether `printed` is what `shown` shows, whole: every line, in order, with nothing else. */
export function printsAsShown(printed: string, shown: string): boolean {
  const pattern = lines(shown)
    .map((line) => (line === '…' ? '(?:.*\\n)*?' : `${linePattern(line)}\\n`))
    .join('');
  return new RegExp(`^${pattern}$`).test(`${lines(printed).join('\n')}\n`);
}

/** Whether every line `shown` shows was printed, in order, among other lines (the logs of a long-running command). */
export function printsAmongOthers(printed: string, shown: string): boolean {
  const wanted = lines(shown).filter((line) => line !== '…');
  let next = 0;
  for (const line of lines(printed)) {
    if (next < wanted.length && new RegExp(`^${linePattern(wanted[next]!)}$`).test(line)) next += 1;
  }
  return next === wanted.length;
}
