/**
 * Schema validation of one parsed policy file, with every ajv error mapped to a
 * located PolicyError (file:line:column, field, readable message).
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { PolicyError } from './errors.js';
import type { PolicyKinds } from './kinds.js';
import { NAME_HINT, NAME_PATTERN, policyFileSchema, type RawPolicyFile } from './schema.js';
import type { PolicySource } from './source.js';

/** One compiled validator per registry of kinds (in practice one per process). */
const validators = new WeakMap<PolicyKinds, ValidateFunction<RawPolicyFile>>();

function validatorFor(kinds: PolicyKinds): ValidateFunction<RawPolicyFile> {
  let validate = validators.get(kinds);
  if (validate === undefined) {
    const ajv = new Ajv({ allErrors: true, verbose: true, strict: true });
    validate = ajv.compile<RawPolicyFile>(policyFileSchema(kinds));
    validators.set(kinds, validate);
  }
  return validate;
}

export function validatePolicyFile(
  source: PolicySource,
  data: unknown,
  kinds: PolicyKinds,
): { ok: true; file: RawPolicyFile } | { ok: false; errors: PolicyError[] } {
  const validateFile = validatorFor(kinds);
  if (validateFile(data)) return { ok: true, file: data };
  const errors = (validateFile.errors ?? [])
    .filter((e) => e.propertyName === undefined)
    .map((e) => toPolicyError(source, data, e));
  return { ok: false, errors: dedupe(errors) };
}

function toPolicyError(source: PolicySource, data: unknown, e: ErrorObject): PolicyError {
  const path = pointerToPath(data, e.instancePath);
  const params = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'additionalProperties': {
      const key = String(params.additionalProperty);
      const allowed = Object.keys((e.parentSchema?.properties as object | undefined) ?? {});
      return source.error([...path, key], `unknown field (allowed: ${allowed.join(', ')})`, 'key');
    }
    case 'required':
      return source.error([...path, String(params.missingProperty)], 'missing required field');
    case 'type':
      return source.error(path, `must be ${article(String(params.type))} (got ${describe(e.data)})`);
    case 'enum':
      return source.error(
        path,
        `must be one of ${(params.allowedValues as unknown[]).join(', ')} (got ${describe(e.data)})`,
      );
    case 'const':
      return source.error(path, `must be ${JSON.stringify(params.allowedValue)} (got ${describe(e.data)})`);
    case 'propertyNames':
      return source.error([...path, String(params.propertyName)], `name ${NAME_HINT}`, 'key');
    case 'pattern':
      return source.error(path, params.pattern === NAME_PATTERN ? NAME_HINT : (e.message ?? 'is invalid'));
    default:
      return source.error(path, e.message ?? 'is invalid');
  }
}

/** JSON pointer → field path; array indices become numbers (decided by the data, not the text). */
function pointerToPath(data: unknown, pointer: string): (string | number)[] {
  if (pointer === '') return [];
  const path: (string | number)[] = [];
  let node: unknown = data;
  for (const raw of pointer.slice(1).split('/')) {
    const part = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(node)) {
      const index = Number(part);
      path.push(index);
      node = node[index];
    } else {
      path.push(part);
      node =
        node !== null && typeof node === 'object' && Object.hasOwn(node, part)
          ? (node as Record<string, unknown>)[part]
          : undefined;
    }
  }
  return path;
}

function article(type: string): string {
  const names: Record<string, string> = {
    object: 'a mapping',
    array: 'a list',
    string: 'a string',
    integer: 'an integer',
    number: 'a number',
    boolean: 'true or false',
  };
  return names[type] ?? type;
}

function describe(value: unknown): string {
  if (value === null || value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  return JSON.stringify(value);
}

function dedupe(errors: PolicyError[]): PolicyError[] {
  const seen = new Set<string>();
  return errors.filter((e) => {
    const key = `${e.line}:${e.column}:${e.field}:${e.message}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
