/**
 * Lock templates: `order:{orderId}`, `tenant:{header.x-tenant}:order:{orderId}`.
 * `{name}` is a path parameter of the route; `{header.name}` is a request header,
 * which must then be present exactly once.
 */
import { checkLockKey } from '../lock-keys.js';

export type TemplatePart =
  { kind: 'text'; value: string } | { kind: 'param'; name: string } | { kind: 'header'; name: string };

export interface LockTemplate {
  readonly source: string;
  readonly parts: readonly TemplatePart[];
}

const PARAM_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;

/**
 * Headers a lock may not be derived from: hop-by-hop headers (removed in transit),
 * the token itself, framing headers, and headers the gateway adds.
 */
export const FORBIDDEN_LOCK_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'fencing-token',
  'fencing-sequencer',
  'forwarded',
]);

export type TemplateParse = { ok: true; template: LockTemplate } | { ok: false; reason: string };

export function parseLockTemplate(source: string): TemplateParse {
  const parts: TemplatePart[] = [];
  let text = '';
  let i = 0;
  while (i < source.length) {
    const ch = source[i];
    if (ch === '}') return { ok: false, reason: `unmatched "}" at position ${i + 1}` };
    if (ch !== '{') {
      text += ch;
      i += 1;
      continue;
    }
    const end = source.indexOf('}', i + 1);
    if (end < 0) return { ok: false, reason: `unclosed "{" at position ${i + 1}` };
    const inner = source.slice(i + 1, end).trim();
    const part = parsePlaceholder(inner);
    if (typeof part === 'string') return { ok: false, reason: part };
    if (text.length > 0) parts.push({ kind: 'text', value: text });
    text = '';
    parts.push(part);
    i = end + 1;
  }
  if (text.length > 0) parts.push({ kind: 'text', value: text });
  const staticText = parts.map((p) => (p.kind === 'text' ? p.value : 'x')).join('');
  const key = checkLockKey(staticText);
  if (!key.ok) return { ok: false, reason: key.reason };
  return { ok: true, template: { source, parts } };
}

function parsePlaceholder(inner: string): TemplatePart | string {
  if (inner.length === 0) return 'empty placeholder "{}"';
  if (inner.includes('{')) return `nested "{" in placeholder "{${inner}}"`;
  if (inner.startsWith('header.')) {
    const name = inner.slice('header.'.length).toLowerCase();
    if (!HEADER_NAME.test(name)) return `invalid header name in "{${inner}}"`;
    if (name.includes('_'))
      return `the gateway drops header names with "_" (as nginx does), so "{${inner}}" would never be found`;
    if (
      FORBIDDEN_LOCK_HEADERS.has(name) ||
      name.startsWith('x-fencegate-') ||
      name.startsWith('x-forwarded-')
    ) {
      return `a lock cannot be derived from the "${name}" header`;
    }
    return { kind: 'header', name };
  }
  if (!PARAM_NAME.test(inner)) return `invalid placeholder "{${inner}}": use {param} or {header.name}`;
  return { kind: 'param', name: inner };
}

/** Path parameters a template references (for the "unknown parameter" check). */
export function templateParams(template: LockTemplate): string[] {
  return template.parts.flatMap((p) => (p.kind === 'param' ? [p.name] : []));
}

/** What a header lookup found: its single value, or that it is missing / repeated. */
export type HeaderLookup = (name: string) => { ok: true; value: string } | { ok: false; reason: string };

export type LockRender = { ok: true; key: string } | { ok: false; reason: string };

export function renderLock(
  template: LockTemplate,
  params: Readonly<Record<string, string>>,
  header: HeaderLookup,
): LockRender {
  let key = '';
  for (const part of template.parts) {
    if (part.kind === 'text') {
      key += part.value;
    } else if (part.kind === 'param') {
      // Own properties only: a name like "constructor" must not find Object.prototype's.
      const value = Object.hasOwn(params, part.name) ? params[part.name] : undefined;
      if (value === undefined) return { ok: false, reason: `path parameter "${part.name}" is missing` };
      key += value;
    } else {
      const found = header(part.name);
      if (!found.ok) return found;
      key += found.value;
    }
  }
  const check = checkLockKey(key);
  return check.ok ? { ok: true, key } : { ok: false, reason: check.reason };
}
