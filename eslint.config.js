import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.fencegate/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  {
    // The dashboard's page script runs in the browser.
    files: ['src/control/dashboard/assets/**/*.js'],
    languageOptions: { globals: { ...globals.browser }, sourceType: 'script' },
  },
);
