import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// What the README (or a page of docs/ it moved to) prints for people to copy, read by the tests
// that follow it, so the text and the test cannot drift apart.

const projectRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** README.md, then docs/*.md, as paths relative to the clone's root. */
function documents(): string[] {
  const docs = existsSync(`${projectRoot}docs`) ? readdirSync(`${projectRoot}docs`).filter((name) => name.endsWith('.md')).sort().map((name) => `docs/${name}`) : [];
  return ['README.md', ...docs];
}

/** Every fenced code block of a Markdown text, without its fences. */
function fencedBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```[^\n]*\n([\s\S]*?)^```\s*$/gm)].map((match) => match[1]!);
}

/** The first fenced block, in README.md or docs/*.md, with a line starting with `lineStart`; and where it is. */
export function documentedBlock(lineStart: string): { file: string; text: string } {
  for (const file of documents()) {
    const block = fencedBlocks(readFileSync(`${projectRoot}${file}`, 'utf8')).find((text) => text.split('\n').some((line) => line.startsWith(lineStart)));
    if (block !== undefined) return { file, text: block };
  }
  throw new Error(`no fenced block with a line starting ${JSON.stringify(lineStart)} in ${documents().join(', ')}`);
}
