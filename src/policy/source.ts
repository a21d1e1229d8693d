/**
 * One policy file parsed with the `yaml` Document API, keeping a LineCounter so any
 * field path (from the schema validator or the semantic checks) can be mapped back
 * to a line and column in the file.
 */
import { isMap, isPair, isScalar, isSeq, LineCounter, parseDocument } from 'yaml';
import type { Document, Node, Pair } from 'yaml';
import { fieldName, type FieldPath, type PolicyError } from './errors.js';

/** Whether an error should point at a map entry's key or at its value. */
export type Anchor = 'key' | 'value';

export class PolicySource {
  private constructor(
    readonly file: string,
    private readonly doc: Document.Parsed,
    private readonly lines: LineCounter,
  ) {}

  /** Parses YAML text; syntax errors (including duplicate keys, several documents) are returned located. */
  static parse(
    file: string,
    text: string,
  ): { ok: true; source: PolicySource } | { ok: false; errors: PolicyError[] } {
    const lines = new LineCounter();
    const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
    const source = new PolicySource(file, doc, lines);
    if (doc.errors.length > 0) {
      const errors = doc.errors.map((e) => {
        const { line, col } = lines.linePos(e.pos[0]);
        const field = fieldName(source.pathAt(e.pos[0]));
        const message =
          e.code === 'MULTIPLE_DOCS'
            ? 'a policy file holds one YAML document; split several into several files'
            : `YAML syntax error: ${firstLine(e.message)}`;
        return { file, line, column: col, field, message };
      });
      return { ok: false, errors };
    }
    return { ok: true, source };
  }

  /** The document as plain data (aliases bounded by the yaml library's maxAliasCount). */
  toData(): unknown {
    return this.doc.toJS({ maxAliasCount: 50 });
  }

  /** A located error for `path`; when the exact node is absent, the nearest present ancestor is used. */
  error(path: FieldPath, message: string, anchor: Anchor = 'value'): PolicyError {
    const { line, column } = this.position(path, anchor);
    return { file: this.file, line, column, field: fieldName(path), message };
  }

  position(path: FieldPath, anchor: Anchor = 'value'): { line: number; column: number } {
    const offset = this.offsetOf(path, anchor);
    const { line, col } = this.lines.linePos(offset);
    return { line, column: col };
  }

  /** Best effort: the path of the innermost map entry or list item containing `offset`. */
  pathAt(offset: number): (string | number)[] {
    const path: (string | number)[] = [];
    let node: unknown = this.doc.contents;
    for (;;) {
      if (isMap(node)) {
        const pair = node.items.find((p) => contains(p.key, offset) || contains(p.value, offset));
        const key = pair === undefined ? undefined : keyOf(pair);
        if (pair === undefined || key === undefined) return path;
        path.push(key);
        if (!contains(pair.value, offset)) return path;
        node = pair.value;
      } else if (isSeq(node)) {
        const index = node.items.findIndex((item) => contains(item, offset));
        if (index < 0) return path;
        path.push(index);
        node = node.items[index];
      } else {
        return path;
      }
    }
  }

  private offsetOf(path: FieldPath, anchor: Anchor): number {
    let node: unknown = this.doc.contents;
    let offset = rangeStart(node) ?? 0;
    for (let i = 0; i < path.length; i++) {
      const part = path[i];
      const last = i === path.length - 1;
      if (isMap(node)) {
        const pair = node.items.find((p) => keyOf(p) === String(part));
        if (pair === undefined) return offset;
        if (last && anchor === 'key') return rangeStart(pair.key) ?? offset;
        node = pair.value;
        offset = rangeStart(node) ?? rangeStart(pair.key) ?? offset;
      } else if (isSeq(node) && typeof part === 'number') {
        node = node.items[part];
        if (node === undefined) return offset;
        offset = rangeStart(node) ?? offset;
      } else {
        return offset;
      }
    }
    return offset;
  }
}

function keyOf(pair: Pair<unknown, unknown>): string | undefined {
  if (!isPair(pair)) return undefined;
  return isScalar(pair.key) ? String(pair.key.value) : undefined;
}

function rangeStart(node: unknown): number | undefined {
  const range = (node as Node | null | undefined)?.range;
  return range ? range[0] : undefined;
}

function contains(node: unknown, offset: number): boolean {
  const range = (node as Node | null | undefined)?.range;
  return range !== undefined && range !== null && offset >= range[0] && offset < range[2];
}

function firstLine(message: string): string {
  return message.split('\n', 1)[0] ?? message;
}
