/**
 * A row write's body, read without losing anything: JSON.parse (native) judges the
 * syntax, then one pass over the top-level object records where each member's value
 * starts and ends in the text. So a number keeps the digits it was sent with (JSON.parse
 * alone rounds 9007199254740993 and 0.30000000000000001), and a json/jsonb value is
 * passed on as its own text (its numbers, key order, duplicates and spacing as sent).
 *
 * Why not a lossless parser library (lossless-json): its parse runs in JS over every
 * character and still builds JS objects (losing the order of integer-like keys and
 * duplicates in json values), at several times JSON.parse's cost per body; the members
 * of a row object are all this kind needs.
 */
import { isUtf8 } from 'node:buffer';

export type BodyValue =
  | { readonly kind: 'null'; readonly raw: string }
  | { readonly kind: 'bool'; readonly raw: string; readonly value: boolean }
  | { readonly kind: 'string'; readonly raw: string; readonly value: string }
  | { readonly kind: 'number'; readonly raw: string }
  /** An object or an array. */
  | { readonly kind: 'structure'; readonly raw: string };

export type ParsedBody = { ok: true; members: Map<string, BodyValue> } | { ok: false; message: string };

/** An escaped UTF-16 surrogate (`\uD800`…`\uDFFF`): only these can make a lone surrogate. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;
/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** The members of a JSON object, with each value's text; what is wrong with it otherwise. */
export function parseRowObject(bytes: Buffer): ParsedBody {
  if (!isUtf8(bytes)) return { ok: false, message: 'the body is not valid UTF-8' };
  const text = bytes.toString('utf8');
  if (text.trim() === '') return { ok: false, message: 'the body is empty; send a JSON object' };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, message: 'the body is not valid JSON' };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    return { ok: false, message: 'the body must be a JSON object of column values' };
  if (SURROGATE_ESCAPE.test(text) && !wellFormed(parsed))
    return { ok: false, message: 'the body has a lone UTF-16 surrogate (\\uD800-\\uDFFF unpaired)' };
  return members(text, parsed as Record<string, unknown>);
}

function wellFormed(v: unknown): boolean {
  if (typeof v === 'string') return !LONE_SURROGATE.test(v);
  if (typeof v !== 'object' || v === null) return true;
  if (Array.isArray(v)) return v.every(wellFormed);
  return Object.entries(v).every(([k, x]) => !LONE_SURROGATE.test(k) && wellFormed(x));
}

const isWs = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** The index just past the string starting (with its quote) at `i`. */
function stringEnd(text: string, i: number): number {
  let j = i + 1;
  for (;;) {
    const q = text.indexOf('"', j);
    let backslashes = 0;
    while (text.charCodeAt(q - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return q + 1;
    j = q + 1;
  }
}

/** The index just past the value starting at `i` (the text is valid JSON). */
function valueEnd(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 0x22) return stringEnd(text, i);
  if (c !== 0x7b && c !== 0x5b) {
    let j = i;
    while (j < text.length) {
      const d = text.charCodeAt(j);
      if (d === 0x2c || d === 0x7d || d === 0x5d || isWs(d)) break;
      j++;
    }
    return j;
  }
  let depth = 0;
  let j = i;
  for (;;) {
    const d = text.charCodeAt(j);
    if (d === 0x22) {
      j = stringEnd(text, j);
      continue;
    }
    if (d === 0x7b || d === 0x5b) depth++;
    else if (d === 0x7d || d === 0x5d) {
      depth--;
      if (depth === 0) return j + 1;
    }
    j++;
  }
}

function skipWs(text: string, i: number): number {
  while (isWs(text.charCodeAt(i))) i++;
  return i;
}

function members(text: string, parsed: Record<string, unknown>): ParsedBody {
  const out = new Map<string, BodyValue>();
  let i = skipWs(text, 0) + 1; // past "{"
  for (;;) {
    i = skipWs(text, i);
    if (text.charCodeAt(i) === 0x7d) return { ok: true, members: out };
    const keyEnd = stringEnd(text, i);
    const keyRaw = text.slice(i, keyEnd);
    const name = keyRaw.includes('\\') ? (JSON.parse(keyRaw) as string) : keyRaw.slice(1, -1);
    if (out.has(name)) return { ok: false, message: `"${name}" is given more than once` };
    const start = skipWs(text, skipWs(text, keyEnd) + 1); // past ":"
    const end = valueEnd(text, start);
    out.set(name, bodyValue(text.slice(start, end), parsed[name]));
    i = skipWs(text, end);
    if (text.charCodeAt(i) === 0x2c) i++;
  }
}

function bodyValue(raw: string, value: unknown): BodyValue {
  switch (typeof value) {
    case 'string':
      return { kind: 'string', raw, value };
    case 'number':
      return { kind: 'number', raw };
    case 'boolean':
      return { kind: 'bool', raw, value };
    default:
      return value === null ? { kind: 'null', raw } : { kind: 'structure', raw };
  }
}
