/**
 * Loading policies from a file or a directory: a directory contributes all its
 * `*.yaml` / `*.yml` files, sorted by name; routes are taken in file order.
 * Syntax and schema errors are reported for every file first; the semantic
 * checks (which look across files) run only once every file is well-formed.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { compilePolicy, type ValidFile } from './compile.js';
import type { Env } from './env.js';
import type { PolicyError } from './errors.js';
import type { PolicyKinds } from './kinds.js';
import type { CompiledPolicy } from './model.js';
import { PolicySource } from './source.js';
import { validatePolicyFile } from './validate.js';

export type LoadResult = { ok: true; policy: CompiledPolicy } | { ok: false; errors: PolicyError[] };

const POLICY_FILE = /\.ya?ml$/i;

/** Loads the policy at `path` for `kinds` (the registry the composition root hands in). */
/** `env` is what `${NAME}` in an upstream's url reads (src/policy/env.ts); default the process's. */
export async function loadPolicies(
  path: string,
  kinds: PolicyKinds,
  env: Env = process.env,
): Promise<LoadResult> {
  const listed = await listPolicyFiles(path);
  if (!listed.ok) return listed;
  const errors: PolicyError[] = [];
  const valid: ValidFile[] = [];
  for (const file of listed.files) {
    const result = await loadFile(file, kinds);
    if (result.ok) valid.push(result.file);
    else errors.push(...result.errors);
  }
  if (errors.length > 0) return { ok: false, errors };
  return compilePolicy(valid, kinds, env);
}

/**
 * Parses and schema-checks one file's text (exported for tests and `fencegate check` of stdin).
 * Never throws: every problem is a located error (line and column ≥ 1).
 */
export function parsePolicyText(
  file: string,
  text: string,
  kinds: PolicyKinds,
): { ok: true; file: ValidFile } | { ok: false; errors: PolicyError[] } {
  try {
    return parseChecked(file, text, kinds);
  } catch (err) {
    // Not expected (PolicySource catches what yaml throws); kept so a library surprise is an error, not a crash.
    const detail = err instanceof Error ? err.message : String(err);
    return {
      ok: false,
      errors: [{ file, line: 1, column: 1, field: '', message: `cannot read: ${detail}` }],
    };
  }
}

function parseChecked(
  file: string,
  text: string,
  kinds: PolicyKinds,
): { ok: true; file: ValidFile } | { ok: false; errors: PolicyError[] } {
  const parsed = PolicySource.parse(file, text);
  if (!parsed.ok) return parsed;
  const plain = parsed.source.toData();
  if (!plain.ok) return plain;
  const { data } = plain;
  if (data === null || data === undefined) {
    return { ok: false, errors: [{ file, line: 1, column: 1, field: '', message: 'file is empty' }] };
  }
  const validated = validatePolicyFile(parsed.source, data, kinds);
  if (!validated.ok) return validated;
  return { ok: true, file: { source: parsed.source, data: validated.file } };
}

async function loadFile(
  file: string,
  kinds: PolicyKinds,
): Promise<{ ok: true; file: ValidFile } | { ok: false; errors: PolicyError[] }> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    return { ok: false, errors: [wholeFile(file, `cannot read: ${describeFsError(err)}`)] };
  }
  return parsePolicyText(file, text, kinds);
}

async function listPolicyFiles(
  path: string,
): Promise<{ ok: true; files: string[] } | { ok: false; errors: PolicyError[] }> {
  let isDir: boolean;
  try {
    isDir = (await stat(path)).isDirectory();
  } catch (err) {
    return { ok: false, errors: [wholeFile(path, `cannot read: ${describeFsError(err)}`)] };
  }
  if (!isDir) return { ok: true, files: [path] };
  let names: string[];
  try {
    names = await readdir(path);
  } catch (err) {
    return { ok: false, errors: [wholeFile(path, `cannot list directory: ${describeFsError(err)}`)] };
  }
  const files = names
    .filter((n) => POLICY_FILE.test(n) && !n.startsWith('.'))
    .sort()
    .map((n) => join(path, n));
  if (files.length === 0)
    return { ok: false, errors: [wholeFile(path, 'no *.yaml or *.yml policy files in directory')] };
  return { ok: true, files };
}

function wholeFile(file: string, message: string): PolicyError {
  return { file, line: 0, column: 0, field: '', message };
}

function describeFsError(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  if (code === 'ENOENT') return 'no such file or directory';
  if (code === 'EACCES') return 'permission denied';
  return code ?? (err instanceof Error ? err.message : String(err));
}
