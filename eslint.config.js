import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { recordOwnerRule } from './eslint/record-owner-rule.js';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', '.tap/', 'test-output/', 'src/web/vendor/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    languageOptions: { globals: { process: 'readonly', console: 'readonly', URL: 'readonly' } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', ignoreRestSiblings: true }],
    },
  },
  {
    // One owner per record (src/store/record-owners.js). Tests and benchmarks seed the store as
    // any writer would, so the rule holds for the platform's own sources.
    files: ['src/**/*.ts'],
    plugins: { records: { rules: { 'record-owner': recordOwnerRule } } },
    rules: { 'records/record-owner': 'error' },
  },
);
