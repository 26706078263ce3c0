// A record has one owner: only the modules src/store/record-owners.js names for a family may import
// its key builders from src/store/keys.ts, whether by name or through a namespace import.
import { dirname, relative, resolve, sep } from 'node:path';
import { keysModule, recordFamilies, wholeStoreModules } from '../src/store/record-owners.js';

/** builder → the modules that may import it */
const ownersOf = new Map(recordFamilies.flatMap((family) => family.builders.map((builder) => [builder, family.owners])));

const toPosix = (path) => path.split(sep).join('/');

/** @type {import('eslint').Rule.RuleModule} */
export const recordOwnerRule = {
  meta: {
    type: 'problem',
    docs: { description: 'key builders of src/store/keys.ts are imported only by their record family\'s owner module' },
    messages: {
      notOwner: '{{builder}} builds a key of the {{family}} records, which only {{owners}} may build: call what that module offers instead',
      reexport: 'src/store/keys.ts is not re-exported: import what you need from the record family\'s owner module',
    },
    schema: [],
  },
  create(context) {
    const cwd = context.cwd;
    const file = toPosix(relative(cwd, context.filename));
    if (file === keysModule || wholeStoreModules.includes(file)) return {};
    const keysPath = resolve(cwd, keysModule).replace(/\.ts$/, '');
    const isKeysModule = (source) =>
      typeof source === 'string' && source.startsWith('.') && resolve(dirname(context.filename), source).replace(/\.(js|ts)$/, '') === keysPath;
    const familyOf = (builder) => recordFamilies.find((family) => family.builders.includes(builder));
    const check = (node, builder) => {
      const owners = ownersOf.get(builder);
      if (!owners || owners.includes(file)) return;
      context.report({ node, messageId: 'notOwner', data: { builder, family: familyOf(builder).family, owners: owners.join(', ') } });
    };
    return {
      ImportDeclaration(node) {
        if (!isKeysModule(node.source.value)) return;
        for (const specifier of node.specifiers) {
          if (specifier.type === 'ImportSpecifier') check(specifier, specifier.imported.name ?? specifier.imported.value);
          if (specifier.type !== 'ImportNamespaceSpecifier') continue;
          for (const variable of context.sourceCode.getDeclaredVariables(specifier)) {
            for (const reference of variable.references) {
              const member = reference.identifier.parent;
              if (member?.type === 'MemberExpression' && member.object === reference.identifier && member.property.type === 'Identifier') check(member, member.property.name);
            }
          }
        }
      },
      ExportAllDeclaration(node) {
        if (isKeysModule(node.source.value)) context.report({ node, messageId: 'reexport' });
      },
      ExportNamedDeclaration(node) {
        if (node.source && isKeysModule(node.source.value)) context.report({ node, messageId: 'reexport' });
      },
    };
  },
};
