import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ESLint } from 'eslint';

// One owner per record: the lint rule (eslint/record-owner-rule.js) keeps each family's key
// builders inside the module src/store/record-owners.js names, and docs/architecture.md's Keys
// table says the same as that configuration.

const root = fileURLToPath(new URL('../../../', import.meta.url));

interface RecordFamily {
  family: string;
  keys: string[];
  builders: string[];
  owners: string[];
}

const loadOwners = async (): Promise<{ recordFamilies: RecordFamily[]; wholeStoreModules: string[] }> =>
  (await import(pathToFileURL(join(root, 'src/store/record-owners.js')).href)) as { recordFamilies: RecordFamily[]; wholeStoreModules: string[] };

let eslint: ESLint | undefined;
async function ownerErrors(filePath: string, code: string): Promise<string[]> {
  eslint ??= new ESLint({ cwd: root });
  const [result] = await eslint.lintText(code, { filePath: join(root, filePath) });
  return result!.messages.filter((message) => message.ruleId === 'records/record-owner').map((message) => message.message);
}

t.test('a module outside the records layer that imports a key builder fails the lint', async (t) => {
  const errors = await ownerErrors('src/roles/scheduler/sneaky-writer.ts', "import { assignmentKey } from '../../store/keys.js';\nexport const key = assignmentKey('m1', 'web-1.service@abc');\n");
  t.equal(errors.length, 1);
  t.match(errors[0], /assignmentKey builds a key of the assignments records, which only src\/store\/records\/assignments\.ts may build/);
});

t.test('a namespace import is checked by the builders it uses, and prefixes stay open to readers', async (t) => {
  const code = "import * as keys from '../../store/keys.js';\nexport const a = keys.assignmentRoot;\nexport const b = keys.journalKey('x');\n";
  const errors = await ownerErrors('src/roles/orchestrator/reader.ts', code);
  t.equal(errors.length, 1, 'only the builder is refused');
  t.match(errors[0], /journalKey/);
});

t.test('re-exporting the keys module is refused', async (t) => {
  t.equal((await ownerErrors('src/http/keys-again.ts', "export * from '../store/keys.js';\n")).length, 1);
});

t.test("the family's owner may import its builders, and no other family's", async (t) => {
  const own = "import { assignmentKey } from '../keys.js';\nexport const key = assignmentKey('m1', 'web-1.service@abc');\n";
  t.same(await ownerErrors('src/store/records/assignments.ts', own), []);
  const other = "import { unitStatusKey } from '../keys.js';\nexport const key = unitStatusKey('m1', 'web-1.service@abc');\n";
  t.equal((await ownerErrors('src/store/records/assignments.ts', other)).length, 1);
});

t.test('every key builder of src/store/keys.ts belongs to one family, whose owners exist', async (t) => {
  const { recordFamilies, wholeStoreModules } = await loadOwners();
  const builders = [...readFileSync(join(root, 'src/store/keys.ts'), 'utf8').matchAll(/^export const (\w+Key)\b/gm)].map((match) => match[1]!);
  t.ok(builders.length > 20, 'the builders are found');
  const configured = recordFamilies.flatMap((family) => family.builders);
  t.same([...configured].sort(), [...builders].sort(), 'each builder is configured once, and only builders keys.ts exports');
  for (const module of [...recordFamilies.flatMap((family) => family.owners), ...wholeStoreModules]) t.ok(existsSync(join(root, module)), `${module} exists`);
});

/** The Keys table of docs/architecture.md: each row's keys and the modules its "written by" cell names. */
function keysTable(): { keys: string[]; owners: string[] }[] {
  const text = readFileSync(join(root, 'docs/architecture.md'), 'utf8');
  const section = text.slice(text.indexOf('### Keys'), text.indexOf('\n## ', text.indexOf('### Keys')));
  const rows = section.split('\n').filter((line) => line.startsWith('| `/platform/'));
  const ticked = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map((match) => match[1]!);
  return rows.map((row) => {
    const [keyCell, writtenBy] = row.split(' | ');
    return { keys: ticked(keyCell!), owners: ticked(writtenBy!).filter((name) => name.endsWith('.ts')) };
  });
}

t.test("docs/architecture.md's Keys table names exactly the owners the lint rule enforces", async (t) => {
  const { recordFamilies } = await loadOwners();
  const rows = keysTable();
  t.equal(rows.length, recordFamilies.length, 'one row per record family');
  for (const family of recordFamilies) {
    const row = rows.find((candidate) => candidate.keys.join() === family.keys.join());
    if (!row) {
      t.fail(`no row of the Keys table lists ${family.keys.join(', ')} (the ${family.family} records)`);
      continue;
    }
    t.same(row.owners, family.owners, `the ${family.family} row names its owner modules, and only them`);
  }
});
