/**
 * Policy errors point at a file, a 1-based line and column, and the field they are
 * about (a path such as `routes[0].lock`), so `fencegate check` output can be
 * clicked through in an editor. Line and column are 0 when the error is about the
 * file as a whole (unreadable, empty directory…).
 */
export interface PolicyError {
  file: string;
  line: number;
  column: number;
  /** Dotted path of the field, e.g. `routes[0].fencing.check`; empty for whole-file errors. */
  field: string;
  message: string;
}

/** `policies/orders.yaml:12:5: routes[0].lock: references unknown path parameter "id"` */
export function formatPolicyError(e: PolicyError): string {
  const where = e.line > 0 ? `${e.file}:${e.line}:${e.column}` : e.file;
  return e.field.length > 0 ? `${where}: ${e.field}: ${e.message}` : `${where}: ${e.message}`;
}

export type FieldPath = readonly (string | number)[];

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_-]*$/;

/** Renders a path as `routes[0].fencing.check`; keys that are not plain names are quoted. */
export function fieldName(path: FieldPath): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else if (IDENTIFIER.test(part)) out += out.length === 0 ? part : `.${part}`;
    else out += `[${JSON.stringify(part)}]`;
  }
  return out;
}
