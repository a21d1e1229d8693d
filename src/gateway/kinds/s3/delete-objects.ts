/**
 * A bounded parser for the body of S3 DeleteObjects (`POST /bucket?delete`):
 *
 *   <?xml version="1.0" encoding="UTF-8"?>
 *   <Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
 *     <Object><Key>a.pdf</Key><VersionId>v1</VersionId></Object>
 *     <Quiet>true</Quiet>
 *   </Delete>
 *
 * The gateway must know every key such a request deletes before it admits it, so the
 * parser accepts a deliberately small language and refuses everything else, rather than
 * risk reading fewer keys than the storage will: no DOCTYPE (no entity definitions at
 * all), no comments, CDATA or processing instructions besides the leading declaration,
 * no namespace prefixes, attributes only `xmlns` on `<Delete>`, and only the elements
 * above (plus `ETag`, `LastModifiedTime`, `Size` of conditional deletes) in their
 * places. Text is UTF-8; the five predefined entities and numeric character references
 * are decoded; a raw CR inside a value is refused (XML would rewrite it to LF, a reader
 * that did not would see another key). Bounded: at most `maxBytes` of input and
 * `maxKeys` keys.
 */

export const DELETE_OBJECTS_MAX_BYTES = 1024 * 1024;
export const DELETE_OBJECTS_MAX_KEYS = 1000;

export interface DeleteObjectsLimits {
  maxBytes: number;
  maxKeys: number;
}

export type DeleteObjectsParse =
  { ok: true; keys: string[] } | { ok: false; reason: string; tooLarge?: boolean };

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

const OBJECT_CHILDREN = new Set(['Key', 'VersionId', 'ETag', 'LastModifiedTime', 'Size']);
const NAME = /^[A-Za-z_][A-Za-z0-9._-]*$/;
const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };
const S3_MAX_KEY_BYTES = 1024;

class Refused extends Error {}

function refuse(reason: string): never {
  throw new Refused(reason);
}

/** XML 1.0 Char, for characters written raw or as references. */
function isXmlChar(cp: number): boolean {
  return (
    cp === 0x9 ||
    cp === 0xa ||
    cp === 0xd ||
    (cp >= 0x20 && cp <= 0xd7ff) ||
    (cp >= 0xe000 && cp <= 0xfffd) ||
    (cp >= 0x10000 && cp <= 0x10ffff)
  );
}

function isSpace(ch: string | undefined): boolean {
  return ch === ' ' || ch === '\t' || ch === '\n' || ch === '\r';
}

interface Tag {
  name: string;
  closing: boolean;
  selfClosing: boolean;
  attributes: Map<string, string>;
}

class Reader {
  pos = 0;
  constructor(readonly text: string) {}

  get done(): boolean {
    return this.pos >= this.text.length;
  }

  skipSpace(): void {
    while (isSpace(this.text[this.pos])) this.pos++;
  }

  startsWith(s: string): boolean {
    return this.text.startsWith(s, this.pos);
  }

  /** The optional `<?xml version="1.0" encoding="UTF-8"?>` at the very start. */
  declaration(): void {
    if (!this.startsWith('<?xml')) return;
    if (!isSpace(this.text[this.pos + 5])) refuse('processing instructions are not accepted');
    const end = this.text.indexOf('?>', this.pos);
    if (end < 0) refuse('unterminated XML declaration');
    const body = this.text.slice(this.pos + 5, end);
    if (!/^(\s+[A-Za-z]+\s*=\s*("[^"<&]*"|'[^'<&]*'))*\s*$/.test(body)) refuse('malformed XML declaration');
    const encoding = /encoding\s*=\s*["']([^"']*)["']/.exec(body)?.[1];
    if (encoding !== undefined && encoding.toLowerCase() !== 'utf-8') refuse('only UTF-8 is accepted');
    this.pos = end + 2;
  }

  /** The next markup at the current position, which must start with '<'. */
  tag(): Tag {
    if (this.text[this.pos] !== '<') refuse('expected an element');
    if (this.startsWith('<!DOCTYPE') || this.startsWith('<!doctype')) refuse('DOCTYPE is not accepted');
    if (this.startsWith('<!--')) refuse('comments are not accepted');
    if (this.startsWith('<![CDATA[')) refuse('CDATA sections are not accepted');
    if (this.startsWith('<!') || this.startsWith('<?')) refuse('markup declarations are not accepted');
    this.pos++;
    const closing = this.text[this.pos] === '/';
    if (closing) this.pos++;
    const name = this.name();
    const attributes = new Map<string, string>();
    for (;;) {
      const before = this.pos;
      this.skipSpace();
      const ch = this.text[this.pos];
      if (ch === '>') {
        this.pos++;
        return { name, closing, selfClosing: false, attributes };
      }
      if (ch === '/' && this.text[this.pos + 1] === '>' && !closing) {
        this.pos += 2;
        return { name, closing, selfClosing: true, attributes };
      }
      if (closing || this.pos === before || ch === undefined) refuse(`malformed tag <${name}>`);
      const attr = this.name();
      this.skipSpace();
      if (this.text[this.pos] !== '=') refuse(`malformed attribute ${attr}`);
      this.pos++;
      this.skipSpace();
      const quote = this.text[this.pos];
      if (quote !== '"' && quote !== "'") refuse(`attribute ${attr} must be quoted`);
      const end = this.text.indexOf(quote, this.pos + 1);
      if (end < 0) refuse(`unterminated attribute ${attr}`);
      const raw = this.text.slice(this.pos + 1, end);
      if (raw.includes('<')) refuse(`"<" in attribute ${attr}`);
      if (attributes.has(attr)) refuse(`attribute ${attr} appears twice`);
      attributes.set(attr, decodeText(raw));
      this.pos = end + 1;
    }
  }

  private name(): string {
    const start = this.pos;
    while (this.pos < this.text.length && /[A-Za-z0-9._:-]/.test(this.text[this.pos] ?? '')) this.pos++;
    const name = this.text.slice(start, this.pos);
    if (name.includes(':')) refuse(`namespace prefixes are not accepted (${name})`);
    if (!NAME.test(name)) refuse('malformed element or attribute name');
    return name;
  }

  /** Character data up to the next '<' (decoded). */
  text_(): string {
    const end = this.text.indexOf('<', this.pos);
    if (end < 0) refuse('unexpected end of document');
    const raw = this.text.slice(this.pos, end);
    this.pos = end;
    return decodeText(raw);
  }
}

/** Decodes entity and character references; refuses a bare '&', ']]>' and non-XML characters. */
function decodeText(raw: string): string {
  if (raw.includes(']]>')) refuse('"]]>" in text');
  let out = '';
  let i = 0;
  while (i < raw.length) {
    const cp = raw.codePointAt(i) ?? 0;
    if (cp !== 0x26) {
      if (!isXmlChar(cp)) refuse('a character not allowed in XML');
      out += String.fromCodePoint(cp);
      i += cp > 0xffff ? 2 : 1;
      continue;
    }
    const end = raw.indexOf(';', i);
    if (end < 0 || end - i > 12) refuse('a bare "&" (write &amp;)');
    const ref = raw.slice(i + 1, end);
    let value: string;
    if (/^#[0-9]{1,7}$/.test(ref) || /^#x[0-9A-Fa-f]{1,6}$/.test(ref)) {
      const n = ref[1] === 'x' ? Number.parseInt(ref.slice(2), 16) : Number.parseInt(ref.slice(1), 10);
      if (!isXmlChar(n)) refuse(`character reference &${ref}; is not an XML character`);
      value = String.fromCodePoint(n);
    } else if (Object.hasOwn(ENTITIES, ref)) {
      value = ENTITIES[ref] ?? '';
    } else {
      refuse(`unknown entity &${ref};`);
    }
    out += value;
    i = end + 1;
  }
  return out;
}

function expectOpen(r: Reader, name: string): Tag {
  const tag = r.tag();
  if (tag.closing || tag.name !== name) refuse(`expected <${name}>`);
  return tag;
}

/** A leaf element's text: `<Name>text</Name>` or `<Name/>` (empty), the open tag already read. */
function leafText(r: Reader, open: Tag): string {
  if (open.attributes.size > 0) refuse(`attributes are not accepted on <${open.name}>`);
  if (open.selfClosing) return '';
  const value = r.text_();
  const close = r.tag();
  if (!close.closing || close.name !== open.name) refuse(`<${open.name}> must hold text only`);
  return value;
}

function objectKey(r: Reader, open: Tag): string {
  if (open.attributes.size > 0) refuse('attributes are not accepted on <Object>');
  if (open.selfClosing) refuse('<Object> without <Key>');
  let key: string | null = null;
  const seen = new Set<string>();
  for (;;) {
    r.skipSpace();
    const tag = r.tag();
    if (tag.closing) {
      if (tag.name !== 'Object') refuse(`unexpected </${tag.name}>`);
      break;
    }
    if (!OBJECT_CHILDREN.has(tag.name)) refuse(`<${tag.name}> is not accepted in <Object>`);
    if (seen.has(tag.name)) refuse(`<${tag.name}> appears twice in one <Object>`);
    seen.add(tag.name);
    const start = r.pos;
    const value = leafText(r, tag);
    if (tag.name === 'Key') {
      if (r.text.slice(start, r.pos).includes('\r')) refuse('a raw CR in <Key> (write &#13;)');
      key = value;
    }
  }
  if (key === null) refuse('<Object> without <Key>');
  if (key.length === 0) refuse('an empty <Key>');
  if (Buffer.byteLength(key, 'utf8') > S3_MAX_KEY_BYTES) refuse('a <Key> longer than 1024 bytes');
  return key;
}

/**
 * The keys a DeleteObjects body names, in order (repeats kept), or why it is refused.
 * `tooLarge` marks a refusal for size (the caller answers 413, not 400).
 */
export function parseDeleteObjects(
  body: Uint8Array,
  limits: DeleteObjectsLimits = { maxBytes: DELETE_OBJECTS_MAX_BYTES, maxKeys: DELETE_OBJECTS_MAX_KEYS },
): DeleteObjectsParse {
  if (body.byteLength > limits.maxBytes) {
    return { ok: false, reason: `the body is larger than ${limits.maxBytes} bytes`, tooLarge: true };
  }
  let text: string;
  try {
    // ignoreBOM: false strips one leading BOM, as XML parsers do.
    text = UTF8.decode(body);
  } catch {
    return { ok: false, reason: 'the body is not valid UTF-8' };
  }
  try {
    const r = new Reader(text);
    r.declaration();
    r.skipSpace();
    const root = expectOpen(r, 'Delete');
    for (const name of root.attributes.keys()) {
      if (name !== 'xmlns') refuse(`attribute ${name} is not accepted on <Delete>`);
    }
    if (root.selfClosing) refuse('<Delete> lists no objects');
    const keys: string[] = [];
    let quiet = false;
    for (;;) {
      r.skipSpace();
      const tag = r.tag();
      if (tag.closing) {
        if (tag.name !== 'Delete') refuse(`unexpected </${tag.name}>`);
        break;
      }
      if (tag.name === 'Object') {
        if (keys.length >= limits.maxKeys) refuse(`more than ${limits.maxKeys} keys`);
        keys.push(objectKey(r, tag));
      } else if (tag.name === 'Quiet') {
        if (quiet) refuse('<Quiet> appears twice');
        quiet = true;
        leafText(r, tag);
      } else {
        refuse(`<${tag.name}> is not accepted in <Delete>`);
      }
    }
    r.skipSpace();
    if (!r.done) refuse('content after </Delete>');
    if (keys.length === 0) refuse('<Delete> lists no objects');
    return { ok: true, keys };
  } catch (err) {
    if (err instanceof Refused) return { ok: false, reason: err.message };
    throw err;
  }
}
