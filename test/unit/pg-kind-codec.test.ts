/**
 * The postgres kind's value rules that need no database: a body read without losing a
 * digit (json-body.ts), numbers judged exactly (decimal.ts), dates as Postgres would
 * store them (datetime.ts), modifiers read from typmod (column.ts), and the one
 * spelling a URL value may have (canonical.ts).
 */
import { describe, expect, it } from 'vitest';
import { urlValue } from '../../src/gateway/kinds/postgres/canonical.js';
import { encode } from '../../src/gateway/kinds/postgres/codec.js';
import { columnOf, modifiersOf, type Column } from '../../src/gateway/kinds/postgres/column.js';
import { dateProblem, isoOf } from '../../src/gateway/kinds/postgres/datetime.js';
import { floatProblem, parseDecimal } from '../../src/gateway/kinds/postgres/decimal.js';
import { parseRowObject, type BodyValue } from '../../src/gateway/kinds/postgres/json-body.js';

function col(base: string, typmod = -1, declared = base): Column {
  return columnOf({
    name: 'c',
    oid: 0,
    typmod,
    base_type: base,
    base_kind: 'b',
    base_sql: base,
    declared,
    deterministic: true,
  });
}

function members(text: string): Map<string, BodyValue> {
  const p = parseRowObject(Buffer.from(text));
  if (!p.ok) throw new Error(p.message);
  return p.members;
}

const num = (raw: string): BodyValue => ({ kind: 'number', raw });
const str = (value: string): BodyValue => ({ kind: 'string', raw: JSON.stringify(value), value });

describe('postgres kind: a body read losslessly', () => {
  it('keeps each value as sent: numbers by their digits, structures by their text', () => {
    const m = members(
      ' { "n" : 9007199254740993, "f":0.30000000000000001 ,"j":{"b":1,"2":[1.0, {"x":1e400}]},"s":"a\\"}b","t":true,"z":null } ',
    );
    expect(m.get('n')).toEqual({ kind: 'number', raw: '9007199254740993' });
    expect(m.get('f')).toEqual({ kind: 'number', raw: '0.30000000000000001' });
    // Key order (an integer-like key after another), spacing and digits as sent.
    expect(m.get('j')).toEqual({ kind: 'structure', raw: '{"b":1,"2":[1.0, {"x":1e400}]}' });
    expect(m.get('s')).toEqual({ kind: 'string', raw: '"a\\"}b"', value: 'a"}b' });
    expect(m.get('t')).toEqual({ kind: 'bool', raw: 'true', value: true });
    expect(m.get('z')).toEqual({ kind: 'null', raw: 'null' });
    expect([...members('{"\\u0041":1,"__proto__":2}').keys()]).toEqual(['A', '__proto__']);
  });

  it('refuses what is not one JSON object in UTF-8, a member given twice, a lone surrogate', () => {
    const refused = (bytes: Buffer | string) => {
      const p = parseRowObject(typeof bytes === 'string' ? Buffer.from(bytes) : bytes);
      return p.ok ? null : p.message;
    };
    expect(refused(Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]))).toContain('UTF-8');
    // An encoded surrogate (CESU-8) is not UTF-8 either.
    expect(
      refused(Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x7d])),
    ).toContain('UTF-8');
    expect(refused('{"a":"\\ud800"}')).toContain('surrogate');
    expect(refused('{"a":{"b":["\\udc00x"]}}')).toContain('surrogate');
    expect(refused('{"\\ud83d":1}')).toContain('surrogate');
    expect(refused('{"a":"\\ud83d\\ude00"}')).toBeNull();
    expect(refused('{"a":"\\\\ud800"}')).toBeNull(); // a backslash, then text
    expect(refused('{"a":1,"a":2}')).toContain('more than once');
    for (const t of ['', ' ', '[1]', '"x"', 'null', '{"a":', '{"a":1}x']) expect(refused(t)).not.toBeNull();
  });
});

describe('postgres kind: numbers judged exactly', () => {
  it('parses decimals to digits and exponent', () => {
    expect(parseDecimal('1000')).toEqual({ neg: false, digits: '1', exp: 3 });
    expect(parseDecimal('-0.00120')).toEqual({ neg: true, digits: '12', exp: -4 });
    expect(parseDecimal('+.5e2')).toEqual({ neg: false, digits: '5', exp: 1 });
    expect(parseDecimal('-0')).toEqual({ neg: false, digits: '', exp: 0 });
    expect(parseDecimal('1e99999999999')).toBeNull();
    expect(parseDecimal('0x10')).toBeNull();
  });

  it('integers: any exact integral spelling in range; never through a JS number', () => {
    const i8 = col('int8');
    expect(encode(i8, num('9007199254740993'))).toEqual({ ok: true, text: '9007199254740993' });
    expect(encode(i8, num('9.007199254740993e15'))).toEqual({ ok: true, text: '9007199254740993' });
    expect(encode(i8, num('-9223372036854775808'))).toEqual({ ok: true, text: '-9223372036854775808' });
    expect(encode(i8, num('9223372036854775808'))).toMatchObject({ ok: false });
    expect(encode(i8, num('1e300'))).toMatchObject({ ok: false, message: expect.stringContaining('range') });
    expect(encode(col('int2'), num('1e3'))).toEqual({ ok: true, text: '1000' });
    expect(encode(col('int2'), num('32768'))).toMatchObject({ ok: false });
    expect(encode(col('int4'), num('1.5'))).toMatchObject({ ok: false });
    expect(encode(col('int4'), num('-0'))).toEqual({ ok: true, text: '0' });
    // An exponent past any type's: refused, never a JS error.
    for (const base of ['int4', 'int8', 'numeric', 'float8', 'float4'])
      for (const raw of ['1e9999999', '-1E+99999999999', '1e-9999999'])
        expect(encode(col(base), num(raw)), `${base} ${raw}`).toMatchObject({ ok: false });
  });

  it('numeric(p,s): refused rather than rounded; unconstrained numeric takes every digit', () => {
    const n = col('numeric', ((12 << 16) | 2) + 4, 'numeric(12,2)');
    expect(n.mods).toMatchObject({ precision: 12, scale: 2 });
    expect(encode(n, num('19.90'))).toEqual({ ok: true, text: '19.90' });
    expect(encode(n, str('19.900000'))).toEqual({ ok: true, text: '19.900000' });
    expect(encode(n, num('19.901'))).toMatchObject({ ok: false, message: expect.stringContaining('round') });
    expect(encode(n, str('12345678901.5'))).toMatchObject({
      ok: false,
      message: expect.stringContaining('large'),
    });
    expect(encode(n, str('9999999999.99'))).toEqual({ ok: true, text: '9999999999.99' });
    const free = col('numeric');
    expect(encode(free, num('12345678901234567890.123456789'))).toEqual({
      ok: true,
      text: '12345678901234567890.123456789',
    });
    expect(encode(free, num('0.30000000000000001'))).toEqual({ ok: true, text: '0.30000000000000001' });
    expect(encode(free, str('NaN'))).toEqual({ ok: true, text: 'NaN' });
    // A negative scale (Postgres 15): numeric(3,-2) holds multiples of 100.
    const hundreds = col('numeric', ((3 << 16) | (-2 & 0x7ff)) + 4, 'numeric(3,-2)');
    expect(hundreds.mods).toMatchObject({ precision: 3, scale: -2 });
    expect(encode(hundreds, num('12300'))).toEqual({ ok: true, text: '12300' });
    expect(encode(hundreds, num('12340'))).toMatchObject({ ok: false });
  });

  it('floats: a number is taken when it reads back as itself', () => {
    expect(floatProblem('0.1', parseDecimal('0.1')!, false)).toBeNull();
    expect(floatProblem('0.1', parseDecimal('0.1')!, true)).toBeNull();
    expect(floatProblem('1.7976931348623157e308', parseDecimal('1.7976931348623157e308')!, false)).toBeNull();
    expect(floatProblem('0.30000000000000001', parseDecimal('0.30000000000000001')!, false)).toContain('0.3');
    expect(floatProblem('9007199254740993', parseDecimal('9007199254740993')!, false)).toContain(
      '9007199254740992',
    );
    expect(floatProblem('16777217', parseDecimal('16777217')!, true)).toContain('16777216');
    expect(floatProblem('1e39', parseDecimal('1e39')!, true)).toContain('out of range for real');
    expect(floatProblem('1e-400', parseDecimal('1e-400')!, false)).toContain('too small');
    expect(encode(col('float8'), str('-Infinity'))).toEqual({ ok: true, text: '-Infinity' });
    expect(encode(col('float4'), num('-0'))).toEqual({ ok: true, text: '-0' });
  });
});

describe('postgres kind: dates and text as Postgres stores them', () => {
  it('refuses what Postgres would change on the way in', () => {
    expect(dateProblem('2024-02-29', 'date', null)).toBeNull();
    expect(dateProblem('2023-02-29', 'date', null)).toContain('day 29');
    expect(dateProblem('2024-02-30', 'date', null)).toContain('day 30');
    expect(dateProblem('0045-02-29 BC', 'date', null)).toBeNull(); // 45 BC is year -44, a leap year
    expect(dateProblem('0044-02-29 BC', 'date', null)).toContain('day 29');
    expect(dateProblem('2024-01-01T10:00:00', 'date', null)).toContain('without a time');
    expect(dateProblem('2024-01-01T25:00:00', 'timestamp', null)).toContain('hour 25');
    expect(dateProblem('2024-01-01T23:59:60', 'timestamp', null)).toContain('second 60');
    expect(dateProblem('2024-01-01T10:00:00+05:00', 'timestamp', null)).toContain('offset');
    expect(dateProblem('2024-01-01T10:00:00+05:00', 'timestamptz', null)).toBeNull();
    expect(dateProblem('2024-01-01T10:00:00.1234567', 'timestamp', null)).toContain('6 fractional');
    expect(dateProblem('2024-01-01T10:00:00.1230000', 'timestamp', null)).toBeNull();
    expect(dateProblem('2024-01-01T10:00:00.5Z', 'timestamptz', 0)).toContain('0 fractional');
    expect(dateProblem('infinity', 'timestamptz', 0)).toBeNull();
  });

  it('prints as to_json does', () => {
    expect(isoOf('2024-02-29 12:34:56.5+00', 'timestamptz')).toBe('2024-02-29T12:34:56.5+00:00');
    expect(isoOf('0044-03-15 10:00:00+00 BC', 'timestamptz')).toBe('0044-03-15T10:00:00+00:00 BC');
    expect(isoOf('12024-03-15 10:00:00', 'timestamp')).toBe('12024-03-15T10:00:00');
    expect(isoOf('-infinity', 'timestamp')).toBe('-infinity');
  });

  it('reads the modifiers of char, varchar, bit, timestamp', () => {
    expect(modifiersOf('bpchar', 12).length).toBe(8);
    expect(modifiersOf('varchar', -1).length).toBeNull();
    expect(modifiersOf('bit', 4).length).toBe(4);
    expect(modifiersOf('timestamptz', 3).fractionDigits).toBe(3);
    expect(modifiersOf('timestamp', -1).fractionDigits).toBe(6);
    expect(col('bpchar', 12).cast).toBe('pg_catalog.bpchar');
    expect(col('_bit').cast).toBe('pg_catalog.varbit[]');
    const c8 = col('bpchar', 12, 'character(8)');
    expect(encode(c8, str('ABCDEFGH'))).toEqual({ ok: true, text: 'ABCDEFGH' });
    expect(encode(c8, str('ABCDEFGH   '))).toEqual({ ok: true, text: 'ABCDEFGH   ' });
    expect(encode(c8, str('ABCDEFGHI'))).toMatchObject({ ok: false });
    const v3 = col('varchar', 7, 'character varying(3)');
    expect(encode(v3, str('😀😀😀'))).toEqual({ ok: true, text: '😀😀😀' }); // characters, not UTF-16 units
    expect(encode(v3, str('abc '))).toMatchObject({ ok: false }); // Postgres would cut the space
    expect(encode(col('bit', 4, 'bit(4)'), str('101'))).toMatchObject({ ok: false });
    expect(encode(col('varbit', 4, 'bit varying(4)'), str('101'))).toEqual({ ok: true, text: '101' });
  });
});

describe('postgres kind: one spelling per value in a URL', () => {
  const verdict = (c: Column, raw: string) => {
    const v = urlValue(c, raw);
    return v.kind === 'ok' ? v.text : v.kind;
  };

  it('integers in plain decimal digits only, naming the one spelling', () => {
    const i4 = col('int4');
    expect(verdict(i4, '1000')).toBe('1000');
    expect(verdict(i4, '-7')).toBe('-7');
    for (const raw of [
      '1e3',
      '0x3E8',
      '+1000',
      '1000.0',
      ' 1000',
      '0b1111101000',
      '1000.',
      '01000',
      '-0',
      '',
    ])
      expect(verdict(i4, raw), raw).toBe('refused');
    expect(urlValue(i4, '+1000')).toEqual({ kind: 'refused', message: expect.stringContaining('"1000"') });
    expect(verdict(i4, '2147483648')).toBe('refused');
    expect(verdict(col('int8'), '9223372036854775807')).toBe('9223372036854775807');
  });

  it('uuids lower-case with hyphens; char(n) without trailing spaces; base64 canonical', () => {
    const u = col('uuid');
    expect(verdict(u, '0e2f1b9a-5c3d-4e6f-8a7b-9c0d1e2f3a4b')).toBe('0e2f1b9a-5c3d-4e6f-8a7b-9c0d1e2f3a4b');
    for (const raw of [
      '0E2F1B9A-5C3D-4E6F-8A7B-9C0D1E2F3A4B',
      '{0e2f1b9a-5c3d-4e6f-8a7b-9c0d1e2f3a4b}',
      '0e2f1b9a5c3d4e6f8a7b9c0d1e2f3a4b',
    ])
      expect(urlValue(u, raw)).toEqual({
        kind: 'refused',
        message: expect.stringContaining('0e2f1b9a-5c3d-4e6f-8a7b-9c0d1e2f3a4b'),
      });
    const c3 = col('bpchar', 7, 'character(3)');
    expect(verdict(c3, 'AB')).toBe('AB');
    expect(verdict(c3, 'AB ')).toBe('refused');
    expect(verdict(c3, 'ABCD')).toBe('refused');
    expect(verdict(col('text'), 'AB ')).toBe('AB ');
    expect(verdict(col('bytea'), 'QQ==')).toBe('QQ==');
    expect(urlValue(col('bytea'), 'QR==')).toEqual({
      kind: 'refused',
      message: expect.stringContaining('QQ=='),
    });
    expect(verdict(col('bool'), 'true')).toBe('true');
    expect(verdict(col('bool'), 't')).toBe('refused');
    for (const base of ['numeric', 'float8', 'date', 'timestamptz', 'citext', 'inet'])
      expect(verdict(col(base), 'x'), base).toBe('ask');
    expect(verdict(col('jsonb'), '{}')).toBe('refused');
  });
});
