/**
 * One policy file parsed with the `yaml` Document API, keeping a LineCounter so any
 * field path (from the schema validator or the semantic checks) can be mapped back
 * to a line and column in the file.
 */
import { isAlias, isMap, isPair, isScalar, isSeq, LineCounter, parseDocument } from 'yaml';
import type { Alias, Document, Node, Pair } from 'yaml';
import { fieldName, type FieldPath, type PolicyError } from './errors.js';

/** Whether an error should point at a map entry's key or at its value. */
export type Anchor = 'key' | 'value';

/** The most alias expansions one document may need; more is refused as an alias bomb. */
export const MAX_ALIAS_COUNT = 100;

/**
 * Tags whose values are plain JSON. Anything else (`!!omap`, `!!set`, `!!pairs`,
 * `!!binary`, `!!timestamp`, local tags such as `!foo`) would turn into a Map, Set,
 * Buffer, Date or an untagged string, which the schema cannot judge as written.
 */
const JSON_TAGS = new Set(
  ['str', 'int', 'float', 'bool', 'null', 'map', 'seq'].map((t) => `tag:yaml.org,2002:${t}`),
);

export type DataResult = { ok: true; data: unknown } | { ok: false; errors: PolicyError[] };

export class PolicySource {
  private constructor(
    readonly file: string,
    private readonly text: string,
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
    const source = new PolicySource(file, text, doc, lines);
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

  /**
   * The document as plain JSON data, or located errors. Refused, each at its own
   * position: values that are not plain JSON (explicitly tagged collections and
   * scalars such as `!!omap`, `!!set`, `!!binary`, `!!timestamp`; `.inf`/`.nan`),
   * mapping keys that are not strings, aliases without an anchor, aliases to a node
   * containing them, and alias bombs (more than MAX_ALIAS_COUNT expansions, reported
   * at the first alias). Never throws.
   */
  toData(): DataResult {
    const errors: PolicyError[] = [];
    const aliases: { offset: number; path: FieldPath }[] = [];
    this.checkNode(this.doc.contents, [], 0, errors, aliases);
    if (errors.length > 0) return { ok: false, errors };
    try {
      return { ok: true, data: this.doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT }) as unknown };
    } catch (err) {
      // The checks above leave only alias expansion (an alias bomb) to fail here.
      const first = aliases[0];
      const detail = err instanceof Error ? firstLine(err.message) : String(err);
      const message =
        first === undefined
          ? `cannot read the document: ${detail}`
          : `aliases expand to too many nodes (more than ${MAX_ALIAS_COUNT} alias expansions); write the values out`;
      return { ok: false, errors: [this.at(first?.offset ?? 0, first?.path ?? [], message)] };
    }
  }

  private at(offset: number, path: FieldPath, message: string): PolicyError {
    const { line, col } = this.lines.linePos(offset);
    return { file: this.file, line, column: col, field: fieldName(path), message };
  }

  /**
   * Walks the syntax tree (aliases are not followed) refusing what is not plain JSON.
   * `floor` is where the text that may hold this node's tag begins (after its key).
   */
  private checkNode(
    node: unknown,
    path: FieldPath,
    floor: number,
    errors: PolicyError[],
    aliases: { offset: number; path: FieldPath }[],
  ): void {
    if (node === null || node === undefined) return;
    const start = rangeStart(node) ?? floor;
    if (isAlias(node)) {
      aliases.push({ offset: start, path });
      const target = (node as Alias).resolve(this.doc);
      if (target === undefined) {
        errors.push(
          this.at(start, path, `alias "*${node.source}" has no anchor "&${node.source}" before it`),
        );
      } else if (contains(target, start)) {
        errors.push(this.at(start, path, `alias "*${node.source}" refers to a node that contains it`));
      }
      return;
    }
    const tag = (node as Node).tag;
    if (tag !== undefined && !JSON_TAGS.has(tag)) {
      const written = this.tagOffset(floor, start);
      errors.push(this.at(written, path, `the YAML tag ${shortTag(tag)} is not allowed: ${PLAIN_JSON}`));
      return;
    }
    if (isScalar(node)) {
      const v: unknown = node.value;
      const plain =
        v === null ||
        typeof v === 'string' ||
        typeof v === 'boolean' ||
        (typeof v === 'number' && Number.isFinite(v));
      if (!plain) {
        errors.push(this.at(start, path, `${describeValue(v)} is not allowed: ${PLAIN_JSON}`));
      } else if (tag !== undefined && !tagFits(tag, v)) {
        // The tag did not resolve (`!!float soon`): yaml keeps the text, which is not what was written.
        const written = this.tagOffset(floor, start);
        errors.push(this.at(written, path, `the value does not fit its tag ${shortTag(tag)}`));
      }
      return;
    }
    if (isMap(node)) {
      let keyFloor = start;
      for (const pair of node.items) {
        const keyStart = rangeStart(pair.key) ?? keyFloor;
        const key = isScalar(pair.key) && typeof pair.key.value === 'string' ? pair.key.value : undefined;
        const keyTag = (pair.key as Node | null)?.tag;
        if (key === undefined || (keyTag !== undefined && keyTag !== 'tag:yaml.org,2002:str')) {
          errors.push(this.at(keyStart, path, 'mapping keys must be plain strings'));
        } else {
          this.checkNode(pair.value, [...path, key], rangeEnd(pair.key) ?? keyStart, errors, aliases);
        }
        keyFloor = rangeEnd(pair.value) ?? rangeEnd(pair.key) ?? keyFloor;
      }
      return;
    }
    if (isSeq(node)) {
      let itemFloor = start;
      node.items.forEach((item, index) => {
        this.checkNode(item, [...path, index], itemFloor, errors, aliases);
        itemFloor = rangeEnd(item) ?? itemFloor;
      });
    }
  }

  /** Where a tag was written: the last `!…` token between `floor` and the node (the node itself when not found). */
  private tagOffset(floor: number, start: number): number {
    let i = this.text.lastIndexOf('!', start);
    if (i < floor) return start;
    while (i > floor && !/\s/.test(this.text[i - 1] ?? ' ')) i -= 1;
    return i;
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

const PLAIN_JSON = 'policies hold plain JSON values only (strings, numbers, booleans, null, mappings, lists)';

function tagFits(tag: string, v: string | number | boolean | null): boolean {
  switch (shortTag(tag)) {
    case '!!int':
    case '!!float':
      return typeof v === 'number';
    case '!!bool':
      return typeof v === 'boolean';
    case '!!null':
      return v === null;
    case '!!str':
      return typeof v === 'string';
    default:
      return false;
  }
}

function shortTag(tag: string): string {
  return tag.startsWith('tag:yaml.org,2002:') ? `!!${tag.slice('tag:yaml.org,2002:'.length)}` : tag;
}

function describeValue(v: unknown): string {
  if (typeof v === 'number') return `the number ${String(v)}`;
  if (typeof v === 'bigint') return 'a big integer';
  if (v instanceof Date) return 'a timestamp';
  if (v instanceof Uint8Array) return 'binary data';
  return `a value of type ${typeof v === 'object' ? (v?.constructor.name ?? 'object') : typeof v}`;
}

function rangeEnd(node: unknown): number | undefined {
  const range = (node as Node | null | undefined)?.range;
  return range ? range[1] : undefined;
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
